# A thin layer over the Python entry points. Every target first makes sure .venv holds the toolchain.
# NANGATE45_PDK must point at the Nangate45 PDK folder (see README); `make doctor` checks everything.
# A relative NANGATE45_PDK (e.g. ../shared/pdk/nangate45) is taken from this folder, where make runs the
# tools; pdk_config.pdk_from_env makes it absolute before any tool or test uses it.

PY      := .venv/bin/python
STAMP   := .venv/.installed
BUILD   := build
BLOCK   ?= chip
STA_JOBS ?=
MACROS  ?=
LOGS    := $(BUILD)/logs
# make test's pytest-xdist workers: one per core, at most two (each heavy test holds a few GB); 0 runs in-process
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 2 ] && n=2; echo $$n)

# Each step's command, written once: its target runs it, and `make demo` runs it through flow.runlog.
RTL_CMD     = $(PY) -m rtl_gen --block $(BLOCK) --out $(BUILD)/rtl
SIM_CMD     = $(PY) -m verification.sim --rtl $(BUILD)/rtl --out $(BUILD)/sim $(if $(MACROS),--macros $(MACROS))
SYNTH_CMD   = $(PY) -m flow.synth --rtl $(BUILD)/rtl --out $(BUILD)/synth
STA_CMD     = $(PY) -m flow.sta --synth $(BUILD)/synth --out $(BUILD)/sta $(if $(STA_JOBS),--jobs $(STA_JOBS))
PLACE_CMD   = $(PY) -m flow.place --synth $(BUILD)/synth --out $(BUILD)/place
SIGNOFF_CMD = $(PY) -m flow.signoff --place $(BUILD)/place --synth $(BUILD)/synth --out $(BUILD)/signoff
# make demo places without the post-placement STA (and writes the placement's files with it, after sign-off)
PLACE_STA_CMD = $(PY) -m flow.sta --synth $(BUILD)/synth --place $(BUILD)/place --jobs 1
BOUNDARIES_CMD = $(PY) -m flow.boundaries --place $(BUILD)/place
REPORT_CMD  = $(PY) -m flow.report --build $(BUILD) --out $(BUILD)/report

# Steps that need the PDK check it first, so a bad NANGATE45_PDK stops them before any work.
.PHONY: setup pdk doctor rtl lint sim generate synth sta report readme demo test blocks place signoff pnr bench gatesim replay \
        chip-power repaired power equiv dse dse-validate test-nano clean

setup: $(STAMP)

$(STAMP): pyproject.toml tools/setup.sh
	bash tools/setup.sh

doctor: $(STAMP)
	$(PY) -m flow.doctor

rtl: $(STAMP)
	$(RTL_CMD)

# SPEC §7's lint gate as an outside evaluator runs it (no waivers): fails on an error or over 40 warnings.
lint: rtl
	$(PY) -m verification.lint --rtl $(BUILD)/rtl

# MACROS=physical simulates the chip with the storage macros place and route implements (verification/physical_macros.py).
sim: rtl
	$(SIM_CMD)

# The chip writes text: the trained image (nano_k3/trained/) in generate mode on the RTL of `make rtl`, its text
# beside the fixed-point and torch models' greedy text, and its tokens/s (verification/generate.py).
PROMPT ?= def main(
N      ?= 48
generate: rtl
	$(PY) -m verification.generate --rtl $(BUILD)/rtl --prompt "$(PROMPT)" --n $(N) --out $(BUILD)/generate

pdk: $(STAMP)
	@$(PY) -m pdk_config

synth: pdk rtl
	$(SYNTH_CMD)

sta: synth
	$(STA_CMD)

report: $(STAMP)
	$(REPORT_CMD)

# The README's results block, rewritten from the build's JSON (flow/readme_results.py).
readme: $(STAMP)
	$(PY) -m flow.readme_results --build $(BUILD) --readme README.md

# The steps one after another, each once. The chain that makes the chip (synth -> place -> signoff) runs alone
# on the machine; the two timing diagnostics nothing downstream reads (STA of the synthesised netlist, STA of the
# placement before repair) run side by side after sign-off, one OpenSTA each: beside the chain they took a core
# from it (the nano sign-off: 1,282 s beside the placement's STA in a fresh clone's make demo, about 1,000 s
# alone). The placement writes only the state sign-off reads (--defer-outputs); its netlist, DEF, SPEF and
# pictures are written by the placement's STA step, which reads them (about 2 minutes of the nano chain). Then
# flow.boundaries counts the nets between regions that are not registered on both sides (for the report).
# Each step's output goes to $(LOGS)/<step>.log while the terminal shows one status line
# (flow/runlog.py); then the closing summary with each step's wall time and where the report is.
demo: STA_JOBS = 1
demo: pdk
	@$(PY) -m flow.runlog --logs $(LOGS) --step rtl "$(RTL_CMD)" --step sim "$(SIM_CMD)" \
	  --step synth "$(SYNTH_CMD)" --step place "$(PLACE_CMD) --no-sta --defer-outputs" --step signoff "$(SIGNOFF_CMD)" \
	  --step sta "$(STA_CMD)" --beside place_sta "$(PLACE_STA_CMD)" \
	  --step boundaries "$(BOUNDARIES_CMD)" --step report "$(REPORT_CMD)"
	@echo; echo "make demo: summary"
	@$(PY) -m flow.report --build $(BUILD) --out $(BUILD)/report --brief --runtime $(LOGS)/runtime.json

# Gate-level simulation: $(BLOCK)'s synthesised netlist with Nangate45 cell models made from the liberty,
# under the block's own cocotb testbench (verification/gatesim.py).
gatesim: synth
	$(PY) -m verification.gatesim --synth $(BUILD)/synth --block $(BLOCK) --out $(BUILD)/gatesim

# Gate-level replay of the whole chip (verification/replay.py): the synthesised netlist, part by part as
# and-inverter graphs with the SPEC macros, through every cycle of the RTL's short run (its top-level ports recorded
# by Verilator); every output bit compared with the RTL's in every cycle.
replay: synth
	$(PY) -m verification.replay --synth $(BUILD)/synth --rtl $(BUILD)/rtl --out $(BUILD)/replay

# Power of the whole chip from its own run (flow/chip_power.py): the netlist replays the short run with every cell
# output's toggles counted, OpenSTA prices the cells at that activity, the fakeram45 tiles come from their liberty;
# energy per token at make bench's token rate when build/bench/bench.json exists. The nano chip: about 45 minutes.
chip-power: synth
	$(PY) -m flow.chip_power --synth $(BUILD)/synth --rtl $(BUILD)/rtl --out $(BUILD)/chip_power \
	  $(if $(wildcard $(BUILD)/bench/bench.json),--bench $(BUILD)/bench/bench.json)

# Power from measured switching activity (flow/power.py): each engine of POWER_BLOCKS emitted at POWER_PRESET,
# synthesised, its netlist run under its own testbench with toggle counts, priced by OpenSTA at the typical corner.
# Energy per token divides by the token rate of the same preset's chip, simulated (RTL) once into POWER_CHIP.
POWER_PRESET ?= tiny
POWER_BLOCKS ?= dequant_mac moe_router lut_unit
POWER_CHIP   := $(BUILD)/power-chip-$(POWER_PRESET)

$(POWER_CHIP)/sim/summary.json: $(STAMP)
	$(PY) -m rtl_gen --block chip --preset $(POWER_PRESET) --out $(POWER_CHIP)/rtl
	$(PY) -m verification.sim --rtl $(POWER_CHIP)/rtl --out $(POWER_CHIP)/sim

power: pdk $(POWER_CHIP)/sim/summary.json
	$(PY) -m flow.power --preset $(POWER_PRESET) --blocks $(POWER_BLOCKS) --out $(BUILD)/power \
	  --bench $(POWER_CHIP)/sim/summary.json

blocks: $(STAMP)
	$(PY) -m flow.blocks --out $(BUILD)/blocks

place: synth
	$(PLACE_CMD)
	$(BOUNDARIES_CMD)

# Timing repair (sizing, hold buffers) on `make place`'s placement, then sign-off STA at every corner
# (flow/signoff.py). It does not re-run placement: it stops with what to run when build/place is missing.
signoff: $(STAMP)
	$(SIGNOFF_CMD)

pnr: synth
	$(PY) -m flow.orfs --synth $(BUILD)/synth --rtl $(BUILD)/rtl --out $(BUILD)/orfs --run

# Formal equivalence (verification/equiv.py): each part of `make synth`'s netlist (the engines it mapped one by one,
# the other parts cut out as black boxes) proven equal to its RTL by Yosys (equiv_make, equiv_induct), smallest
# first; EQUIV_PARTS (e.g. "core.mem core.logits") limits it, EQUIV_TIMEOUT is the seconds per part.
# build/equiv/equiv.json says which parts are proven and which are only simulated.
EQUIV_PARTS   ?=
EQUIV_TIMEOUT ?= 1800
# The signed-off netlist against make synth's (verification/repaired.py): the same cells and connections up to the
# buffers sign-off inserts and the drive strengths it changes; run after make signoff.
repaired: pdk
	$(PY) -m verification.repaired --synth $(BUILD)/synth --signoff $(BUILD)/signoff

equiv: pdk
	$(PY) -m verification.equiv --synth $(BUILD)/synth --out $(BUILD)/equiv --timeout $(EQUIV_TIMEOUT) \
	  $(if $(EQUIV_PARTS),--only $(EQUIV_PARTS))

# Design-space exploration on Ray Tune (flow/dse): TRIALS different points of DSE_PRESET's space in build/dse
# (results.sqlite, pareto.png, front.md); run again to resume an interrupted sweep or to add trials.
# ADDRESS=host:port joins a running Ray cluster; DSE_CPUS trials at a time on the local Ray, SYNTH_JOBS Yosys
# processes each. A nano trial maps again only the engines whose Verilog changed (`python -m flow.dse reuse --set
# norm_lanes=4`: 3 of 82 modules differ, in the norm, the element feeder and the core's own logic), plus a
# slow-corner STA of the whole chip.
TRIALS     ?= 40
DSE_PRESET ?= nano
DSE_CPUS   ?= 1
SYNTH_JOBS ?= 1
ADDRESS    ?=
TOP        ?= 3
dse: pdk
	$(PY) -m flow.dse --preset $(DSE_PRESET) --trials $(TRIALS) --out $(BUILD)/dse --cache $(BUILD)/synth_cache \
	  --cpus $(DSE_CPUS) --synth-jobs $(SYNTH_JOBS) --resume $(if $(ADDRESS),--address $(ADDRESS))

# The TOP fastest points of the front: RTL simulation of the long run and a flat synthesis (nano: ~33 min, 7.4 GB peak).
dse-validate: pdk
	$(PY) -m flow.dse validate --preset $(DSE_PRESET) --top $(TOP) --out $(BUILD)/dse

# The benchmark always measures the chip, whatever BLOCK the other targets use.
bench: BLOCK = chip
bench: rtl
	$(PY) -m verification.bench --rtl $(BUILD)/rtl --out $(BUILD)/bench

# One line per test, named before it runs and with its duration after (flow/pytest_progress.py); the
# test files are shared out to TEST_WORKERS processes, each file's tests in one of them (--dist loadfile), the
# longest files first (flow/pytest_schedule.py).
# The tests marked nano (the nano chip itself under Verilator, 15-25 minutes each) are left to make test-nano:
# CI runs the small chips (tiny, ci), and the nano chip's sign-off is make demo's.
TEST_CMD = $(PY) -m pytest -v -p flow.pytest_progress --durations=15 -n $(TEST_WORKERS) --dist loadfile
test: $(STAMP)
	$(TEST_CMD) -m "not nano"

test-nano: $(STAMP)
	$(TEST_CMD) -m nano

clean:
	rm -rf $(BUILD)
