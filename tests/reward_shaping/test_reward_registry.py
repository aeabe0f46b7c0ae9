"""Finding shapers by name: built-ins, code registrations, package entry points, and helpful errors."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from cudagym.results import Stage, Status, SubmitResult
from cudagym.reward_shaping import (
    DEFAULT_REWARD,
    ENTRY_POINT_GROUP,
    CompositeShaper,
    FunctionShaper,
    GradedShaper,
    MilestoneShaper,
    Reward,
    RewardNotFound,
    Shaper,
    ShaperError,
    SpeedupShaper,
    StepRecord,
    make_reward,
    register_reward,
    registered_rewards,
)
from cudagym.reward_shaping import registry as registry_module

TIER3 = StepRecord(
    turn=7,
    tool="submit",
    result=SubmitResult(
        stage=Stage.SUBMIT,
        status=Status.OK,
        tier=3,
        compiled=True,
        correct=True,
        speedup_eager=2.0,
        speedup_compile=1.5,
    ),
    terminated=True,
)
PLUGIN_MODULE = "cudagym_test_reward_plugin"


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets its own copy of the code registry."""
    monkeypatch.setattr(registry_module, "_FACTORIES", dict(registry_module._FACTORIES))


def half(step: StepRecord, history: Sequence[StepRecord]) -> float:
    return 0.5


class TestMakeReward:
    def test_default_is_milestone(self) -> None:
        assert DEFAULT_REWARD == "milestone"
        for shaper in (make_reward(), make_reward(None), make_reward("milestone")):
            assert isinstance(shaper, MilestoneShaper)
            assert shaper(TIER3, []) == Reward(3.0, {"tier": 3.0})

    def test_builtin_names_with_options(self) -> None:
        assert make_reward("milestone", truncation_penalty=-1.0).truncation_penalty == -1.0
        speedup = make_reward("speedup", baseline="eager")
        assert isinstance(speedup, SpeedupShaper)
        assert speedup(TIER3, []).value == pytest.approx(math.log(2.0))
        graded = make_reward("graded", turn_cost=0.1)
        assert isinstance(graded, GradedShaper) and graded.turn_cost == 0.1

    def test_bad_options_raise_from_the_factory(self) -> None:
        with pytest.raises(TypeError):
            make_reward("milestone", no_such_option=1)

    def test_composite_by_name(self) -> None:
        shaper = make_reward("composite", parts=[("milestone", 1.0), ("speedup", 0.5, {"clip": 0.1}), (half, 0.0)])
        assert isinstance(shaper, CompositeShaper)
        reward = shaper(TIER3, [])
        assert reward.value == pytest.approx(3.0 + 0.5 * 0.1)
        assert dict(reward.terms) == pytest.approx(
            {
                "milestone": 3.0,
                "milestone/tier": 3.0,
                "speedup": 0.1,
                "speedup/log_speedup_compile": 0.1,
                "half": 0.5,
                "half/half": 0.5,
            }
        )

    def test_a_shaper_instance_is_returned_as_is(self) -> None:
        shaper = GradedShaper()
        assert make_reward(shaper) is shaper
        with pytest.raises(TypeError, match="already built"):
            make_reward(shaper, turn_cost=1.0)

    def test_a_shaper_class_is_built_with_the_options(self) -> None:
        shaper = make_reward(GradedShaper, turn_cost=0.25)
        assert isinstance(shaper, GradedShaper) and shaper.turn_cost == 0.25

    def test_a_function_is_wrapped(self) -> None:
        shaper = make_reward(half)
        assert isinstance(shaper, FunctionShaper)
        assert shaper(TIER3, []) == Reward(0.5, {"half": 0.5})
        assert make_reward(half, name="constant").name == "constant"

    @pytest.mark.parametrize("bad", [42, 1.5, ["milestone"]])
    def test_other_specs_are_rejected(self, bad: object) -> None:
        with pytest.raises(TypeError, match="a reward is a name"):
            make_reward(bad)  # type: ignore[arg-type]


class TestRegisterReward:
    def test_register_and_make(self) -> None:
        register_reward("half", lambda scale=1.0: FunctionShaper(lambda s, h: 0.5 * scale, name="half"))
        assert "half" in registered_rewards()
        assert make_reward("half", scale=4.0)(TIER3, []) == Reward(2.0, {"half": 2.0})

    def test_duplicate_raises_unless_overwrite(self) -> None:
        register_reward("mine", MilestoneShaper)
        with pytest.raises(ValueError, match="'mine' is already registered"):
            register_reward("mine", GradedShaper)
        with pytest.raises(ValueError, match="'milestone' is already registered"):
            register_reward("milestone", GradedShaper)
        register_reward("mine", GradedShaper, overwrite=True)
        assert isinstance(make_reward("mine"), GradedShaper)

    @pytest.mark.parametrize("bad", ["", "a/b"])
    def test_bad_names(self, bad: str) -> None:
        with pytest.raises(ValueError, match="reward name"):
            register_reward(bad, MilestoneShaper)

    def test_factory_must_be_callable(self) -> None:
        with pytest.raises(TypeError, match="callable"):
            register_reward("nope", 3)  # type: ignore[arg-type]

    def test_a_factory_returning_a_protocol_object_is_checked(self) -> None:
        class Plain:
            name = "plain"

            def reset(self) -> None:
                pass

            def __call__(self, step: StepRecord, history: Sequence[StepRecord]) -> float:
                return math.nan

        register_reward("plain", Plain)
        shaper = make_reward("plain")
        assert isinstance(shaper, Shaper) and shaper.name == "plain"
        with pytest.raises(ShaperError, match="'plain' failed: returned a non-finite"):
            shaper(TIER3, [])

    def test_a_factory_returning_something_else_raises(self) -> None:
        register_reward("number", lambda: 5)
        with pytest.raises(TypeError, match="returned int, not a reward shaper"):
            make_reward("number")

    def test_registered_rewards_lists_the_builtins_sorted(self) -> None:
        names = registered_rewards()
        assert {"milestone", "speedup", "graded", "composite"} <= set(names)
        assert names == sorted(names)


class TestRewardNotFound:
    def test_close_match_is_suggested(self) -> None:
        with pytest.raises(RewardNotFound) as info:
            make_reward("milestne")
        message = str(info.value)
        assert message.startswith("no reward named 'milestne'; registered: ")
        assert "composite, graded, milestone, speedup" in message
        assert message.endswith("Did you mean 'milestone'?")

    def test_is_a_key_error_without_a_suggestion_when_nothing_is_close(self) -> None:
        with pytest.raises(KeyError) as info:
            make_reward("zzzzzzzz")
        assert isinstance(info.value, RewardNotFound)
        assert "Did you mean" not in str(info.value)

    def test_code_registrations_are_suggested(self) -> None:
        register_reward("kevin_style", MilestoneShaper)
        with pytest.raises(RewardNotFound, match="Did you mean 'kevin_style'"):
            make_reward("kevin-style")


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An installed distribution (a dist-info on sys.path) declaring rewards in ``cudagym.rewards``."""
    (tmp_path / f"{PLUGIN_MODULE}.py").write_text(
        "from cudagym.reward_shaping import FunctionShaper\n"
        "\n"
        "def make(scale=1.0):\n"
        "    return FunctionShaper(lambda step, history: 0.25 * scale, name='plugin')\n"
    )
    dist_info = tmp_path / "cudagym_test_reward_plugin-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: cudagym-test-reward-plugin\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n"
        f"plugin_reward = {PLUGIN_MODULE}:make\n"
        f"graded = {PLUGIN_MODULE}:make\n"
        "broken_reward = cudagym_test_no_such_module:make\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, PLUGIN_MODULE, raising=False)
    yield tmp_path
    sys.modules.pop(PLUGIN_MODULE, None)


class TestEntryPoints:
    def test_listed_without_being_imported(self, plugin: Path) -> None:
        assert {"plugin_reward", "broken_reward"} <= set(registered_rewards())
        assert PLUGIN_MODULE not in sys.modules

    def test_made_lazily_with_options(self, plugin: Path) -> None:
        shaper = make_reward("plugin_reward", scale=2.0)
        assert PLUGIN_MODULE in sys.modules
        assert shaper.name == "plugin"
        assert shaper(TIER3, []) == Reward(0.5, {"plugin": 0.5})

    def test_code_registration_wins_a_clash(self, plugin: Path) -> None:
        assert isinstance(make_reward("graded"), GradedShaper)

    def test_a_broken_entry_point_names_itself(self, plugin: Path) -> None:
        with pytest.raises(ImportError, match=r"reward 'broken_reward'.*cudagym_test_no_such_module:make") as info:
            make_reward("broken_reward")
        assert isinstance(info.value.__cause__, ModuleNotFoundError)

    def test_entry_point_names_are_suggested(self, plugin: Path) -> None:
        with pytest.raises(RewardNotFound, match="Did you mean 'plugin_reward'"):
            make_reward("plugin_rewrd")

    def test_gone_once_the_distribution_is_gone(self) -> None:
        assert "plugin_reward" not in registered_rewards()
