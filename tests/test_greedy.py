"""Generate mode in the models (nano_k3/greedy.py): the decoder feeds its own argmax back."""
from __future__ import annotations

import numpy as np
import pytest

from nano_k3.config import TINY
from nano_k3.fixed import FixedModel
from nano_k3.greedy import first_difference, fixed_greedy, fixed_outputs, golden_greedy
from nano_k3.image import build_image, read_image
from nano_k3.weights import generate, generate_tokens

SEED = 19
PROMPT = [3, 1, 4]


@pytest.fixture(scope="module")
def weights():
    return generate(TINY, SEED)


@pytest.mark.parametrize("run", [fixed_greedy, golden_greedy])
def test_every_position_after_the_prompt_reads_the_previous_pick(weights, run):
    d = run(weights, PROMPT, TINY.max_seq)
    assert d.tokens[:len(PROMPT)].tolist() == PROMPT
    np.testing.assert_array_equal(d.tokens[len(PROMPT):], d.argmax[len(PROMPT) - 1:-1])
    np.testing.assert_array_equal(d.argmax, np.argmax(d.logits, axis=1))
    assert d.logits.shape == (TINY.max_seq, TINY.vocab)


def test_generation_is_teacher_forcing_on_its_own_tokens(weights):
    """Feeding the generated sequence back as a plain SPEC token array gives the same logits."""
    d = fixed_greedy(weights, PROMPT, 12)
    logits, argmax = FixedModel(weights).forward_sequence(d.tokens)
    np.testing.assert_array_equal(logits, d.logits)
    np.testing.assert_array_equal(argmax, d.argmax)


def test_fixed_outputs_follow_the_image_mode(weights):
    tokens = generate_tokens(TINY, SEED, 10)
    spec = fixed_outputs(read_image(build_image(weights, tokens).data))
    np.testing.assert_array_equal(spec.tokens, tokens)
    np.testing.assert_array_equal(spec.logits, FixedModel(weights).forward_sequence(tokens)[0])
    gen = fixed_outputs(read_image(build_image(weights, tokens, prompt_len=2).data))
    want = fixed_greedy(weights, tokens[:2], 10)
    np.testing.assert_array_equal(gen.logits, want.logits)
    np.testing.assert_array_equal(gen.tokens, want.tokens)


def test_prompt_must_fit(weights):
    with pytest.raises(ValueError, match="1..4"):
        fixed_greedy(weights, [], 4)
    with pytest.raises(ValueError, match="1..2"):
        fixed_greedy(weights, PROMPT, 2)


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 9]) is None
