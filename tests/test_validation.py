"""specsim.validation (scalar and array checkers) and specsim.errors (the family)."""

import numpy as np
import pytest

from specsim import errors, validation
from specsim.errors import CheckpointError, ConfigError, InvalidArgument, SpecsimError


def test_family_is_rooted_in_value_error():
    for cls in (InvalidArgument, ConfigError, CheckpointError):
        assert issubclass(cls, SpecsimError)
        assert issubclass(cls, ValueError)
    assert set(errors.__all__) == {"SpecsimError", "InvalidArgument", "ConfigError",
                                   "CheckpointError"}


@pytest.mark.parametrize("check, good, out", [
    (validation.positive_int, 3, 3),
    (validation.positive_int, np.int64(7), 7),
    (validation.nonnegative_int, 0, 0),
    (validation.integer, -5, -5),
    (validation.probability, 1, 1.0),
    (validation.probability, np.float32(0.25), 0.25),
    (validation.nonnegative_float, 0.0, 0.0),
    (validation.positive_float, 2, 2.0),
])
def test_scalar_checkers_return_python_numbers(check, good, out):
    got = check("x", good)
    assert got == out and type(got) is type(out)


@pytest.mark.parametrize("check, bad, range_text", [
    (validation.positive_int, 0, "positive integer"),
    (validation.positive_int, 2.0, "positive integer"),
    (validation.positive_int, True, "positive integer"),
    (validation.positive_int, np.bool_(True), "positive integer"),
    (validation.positive_int, "3", "positive integer"),
    (validation.nonnegative_int, -1, ">= 0"),
    (validation.integer, 1.5, "an integer"),
    (validation.probability, 1.5, "[0, 1]"),
    (validation.probability, float("nan"), "[0, 1]"),
    (validation.probability, False, "[0, 1]"),
    (validation.nonnegative_float, -0.1, ">= 0"),
    (validation.nonnegative_float, float("inf"), "finite"),
    (validation.positive_float, 0.0, "> 0"),
    (validation.positive_float, 1j, "> 0"),
])
def test_scalar_checkers_name_the_argument_and_range(check, bad, range_text):
    with pytest.raises(InvalidArgument) as info:
        check("my_arg", bad)
    msg = str(info.value)
    assert msg.startswith("my_arg must be")
    assert range_text in msg
    assert repr(bad) in msg or str(float(np.real(bad))) in msg or "got" in msg


def test_positive_int_minimum():
    assert validation.positive_int("k", 2, minimum=2) == 2
    with pytest.raises(InvalidArgument, match=r"^k must be an integer >= 2 \(got 1\)"):
        validation.positive_int("k", 1, minimum=2)


def test_choice_lists_the_allowed_values():
    assert validation.choice("mode", "a", ("a", "b")) == "a"
    with pytest.raises(InvalidArgument, match=r"^mode must be one of 'a', 'b' \(got 'c'\)"):
        validation.choice("mode", "c", ("a", "b"))
    with pytest.raises(InvalidArgument, match="^mode must be one of"):
        validation.choice("mode", [1], ("a", "b"))          # unhashable: still a clean error
    with pytest.raises(InvalidArgument, match="^mode must be one of"):
        validation.choice("mode", np.arange(3), ("a", "b"))  # an array: no ambiguity error


def test_array_checkers_raise_invalid_argument():
    with pytest.raises(InvalidArgument, match=r"^alpha must lie in \[0, 1\] \(got 1.2\)"):
        validation.check_probability("alpha", [0.5, 1.2])
    with pytest.raises(InvalidArgument, match="^k must be an integer >= 1"):
        validation.check_draft_length("k", np.array([1, 0]))
    with pytest.raises(InvalidArgument, match="^a, b must broadcast"):
        validation.broadcast(a=np.zeros(2), b=np.zeros(3))


def test_public_boundaries_raise_the_family():
    """The engine, models and theory raise InvalidArgument for bad arguments."""
    from specsim import analytic, roofline
    from specsim.models import get_preset, init_cache
    from specsim.sampling import validate_sampling

    cfg = get_preset("tiny-llama")
    with pytest.raises(InvalidArgument, match="^batch must be a positive integer"):
        init_cache(cfg, 0, 8)
    with pytest.raises(InvalidArgument, match="^top_k must be"):
        validate_sampling(0.0, -1, 1.0, vocab_size=10)
    with pytest.raises(InvalidArgument, match="^n_tokens must be a positive integer"):
        roofline.forward_cost(cfg, n_tokens=0)
    with pytest.raises(InvalidArgument, match="^alpha must lie in"):
        analytic.speedup(1.5, 3, 0.1)
    with pytest.raises(InvalidArgument, match="^layer_loop must be one of"):
        cfg.replace(layer_loop="python")
