"""Design-space exploration on Ray Tune: the Pareto front of tokens/s against priced area, measured.

    python -m flow.dse --trials N [--preset nano|tiny|ci] [--out build/dse] [--address ADDR] [--resume]
                       [--cache build/synth_cache] [--cpus 1] [--object-store-mb 300] [--synth-jobs 1] [--seed 0]
    python -m flow.dse validate --top K [--preset ...] [--out build/dse]
    python -m flow.dse report [--preset ...] [--out build/dse]
    python -m flow.dse reuse --set FIELD=VALUE ... [--preset ...] [--out build/dse]

The space is every ``ChipParams`` field that changes speed or area, with the values declared on the field
(``hw.params.choice``, ``hw.params.sweep_space``); a DSE preset (``space``) picks the chip it starts from and
the design each trial prices. A trial (``trial``) generates the RTL, takes cycles per token of the SPEC section
8 throughput run from the performance model, synthesises the design engine by engine through flow.synth's part
cache (only engines whose RTL changed are mapped) and times it at the slow corner before placement; budget
breaks, illegal points and tool failures are recorded with their reason. ``sweep`` runs the trials on Ray
Tune with Optuna's TPE search (a local Ray by default, a cluster with ``--address``), resumable with
``--resume``, one line per finished trial; every trial goes into ``<out>/results.sqlite`` (``store``).
``validate`` checks the fastest front points for real (RTL simulation of the long run: bit-exact, cycles
within 2 % of the model; a full synthesis: area within 5 % of the engines' sum). Each command ends by
writing ``<out>/pareto.png`` and ``<out>/front.md`` (``front``). ``reuse`` lists the engines whose Verilog
a point changes, i.e. what its trial maps again (``reuse``).
"""
