"""Property: random well-typed modules made with the Builder (tests/unit/irgen.py) verify, print
and parse back to the same text, and stay valid (and printable) after DCE and CSE."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from irgen import IRGen, random_module

from dlvm.ir import module_text, parse_module
from dlvm.ir.verifier import verify
from dlvm.transforms.pass_manager import PassManager

GENERATED = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SEEDS = st.integers(0, 2**32 - 1)


def round_trip(text: str):
    module = parse_module(text, "generated.dl")
    assert verify(module) == []
    assert module_text(module) == text
    return module


@GENERATED
@given(SEEDS, st.integers(5, 60), st.booleans())
def test_generated_modules_verify_and_round_trip(seed, size, control_flow):
    module = random_module(seed, size, control_flow)
    assert verify(module) == []
    round_trip(module_text(module))


@GENERATED
@given(SEEDS, st.booleans())
def test_dce_and_cse_keep_generated_modules_valid(seed, control_flow):
    module = round_trip(module_text(random_module(seed, 40, control_flow)))
    manager = PassManager()  # verifies after every pass
    passes = PassManager.resolve(["DCE", "CSE", "DCE"])
    manager.run(module, passes)
    round_trip(module_text(module))
    # One run of each reaches its fixpoint: running them again changes nothing.
    again = manager.run(module, PassManager.resolve(["CSE", "DCE"]))
    assert [changed for _, changed in again] == [False, False]


@GENERATED
@given(SEEDS)
def test_passes_on_builder_modules_match_passes_on_parsed_ones(seed):
    built = random_module(seed, 40, control_flow=True)
    parsed = parse_module(module_text(built))
    passes = PassManager.resolve(["CSE", "DCE"])
    PassManager().run(built, passes)
    PassManager().run(parsed, passes)
    assert module_text(built) == module_text(parsed)


def test_generator_is_deterministic_and_covers_the_instruction_mix():
    a = module_text(IRGen(7).module(functions=3, size=80, control_flow=True))
    b = module_text(IRGen(7).module(functions=3, size=80, control_flow=True))
    assert a == b
    text = "".join(module_text(random_module(s, 60, s % 2 == 1)) for s in range(30))
    for word in [
        " = tanh ",
        " = add ",
        " = lessThan ",
        " = select ",
        " = dot ",
        " = transpose ",
        " = reduce ",
        " = concatenate ",
        " = slice ",
        " = shapeCast ",
        " = padShape ",
        " = squeezeShape ",
        " = dataTypeCast ",
        " = literal ",
        " = extract ",
        " = apply ",
        " by @comb",
        "conditional ",
        "branch '",
        "'join",
        "'loop",
    ]:
        assert word in text, word
