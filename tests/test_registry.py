"""The tip registry is the one source: everything central is generated from the records or agrees with them.

The shared property suite that runs every part is in tests/suite/."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from lightning.pytorch.callbacks import Callback

from lightning_speedups.config import PACK_SETTINGS, Speedups, all_settings
from lightning_speedups.tips import BY_ID, TIPS, catalog_rows, get_tip, parts_table
from lightning_speedups.tips.record import PHASES, BenchVariant, BuildContext, Setting, Tip, at

PARTS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "parts.md"


def test_every_tip_of_the_seed_list_is_in_the_registry():
    assert [t.id for t in TIPS] == [f"T{i:02d}" for i in range(1, 25)]
    assert len({t.slug for t in TIPS}) == 24
    assert get_tip("t16") is get_tip("conv-bias") is BY_ID["T16"]
    with pytest.raises(KeyError, match="T01"):
        get_tip("T99")


@pytest.mark.parametrize("tip", TIPS, ids=lambda t: t.id)
def test_record_is_complete(tip: Tip):
    assert tip.parts or tip.lint_rules, f"{tip.id} has neither parts nor lint rules"
    assert all(callable(p) for p in tip.parts)
    for text in (tip.title, tip.does, tip.gain, tip.hurts, tip.claim):
        assert text.strip()
    assert callable(tip.check)
    # bench either times it by samples/s or says why not (target-mode variants come on top)
    throughput = tip.bench_variant("throughput")
    assert (throughput is None) != (not tip.not_timed), (
        f"{tip.id}: a throughput variant or a not_timed reason, not both"
    )
    names = [v.name for v in tip.bench_variants if v.mode == "target"]
    assert len(names) == len(set(names)), f"{tip.id}: its target variants need distinct names"
    # a tip module is named after its id and slug
    assert tip.check.__module__ == f"lightning_speedups.tips.t{tip.id[1:]}_{tip.slug.replace('-', '_')}"


def test_lint_rules_named_in_the_registry_exist_and_belong_to_the_tip():
    from lightning_speedups.lint import RULES

    codes = {r.code: r.tip for r in RULES}
    named = {code for tip in TIPS for code in tip.lint_rules}
    for tip in TIPS:
        for code in tip.lint_rules:
            assert codes.get(code) == tip.id, f"{tip.id} names {code}, which is not a rule of that tip"
    assert named == set(codes), f"lint rules no record names: {sorted(set(codes) - named)}"


def test_every_speedups_key_has_one_owner_and_is_a_field():
    paths = [s.path for _, s in all_settings()]
    assert len(paths) == len(set(paths))
    s = Speedups()
    for path in paths:
        s.setting_value(path)  # exists
    top = {f.name for f in dataclasses.fields(Speedups)}
    assert top == {p.split(".")[0] for p in paths}


def test_defaults_are_off_and_each_setting_turns_its_part_on():
    assert Speedups().active_parts() == set()
    for owner, setting in all_settings():
        if setting.path == "summary":
            continue
        assert not setting.is_on(setting.default_value()), f"{owner} {setting.path}: the default must be off"


def test_keys_a_tip_uses_exist():
    s = Speedups()
    for tip in TIPS:
        for key in tip.uses:
            s.setting_value(key)
        for key in tip.preset_keys:
            assert key.startswith("speedups.")


def test_bench_overrides_are_real_settings():
    s = Speedups()
    for tip in TIPS:
        for variant in tip.bench_variants:
            for key in variant.overrides:
                s.setting_value(key)


def test_callbacks_are_placed_in_the_records_order():
    s = Speedups(debug=True, conv_bias=True, channels_last=True, effective_batch_size=8, optimizer="auto")
    s.monitors.checks = True
    s.lr_schedule.name = "onecycle"
    names = [type(cb).__name__ for cb in s.callbacks(accelerator="cpu")]
    assert names == [
        "DebugMode",
        "AutoProbe",  # optimizer: auto is timed on the model at the first batch
        "EffectiveBatchSize",
        "ConvBiasRemoval",
        "ChannelsLast",
        "FusedOptimizer",
        "LRSchedule",
        "DebugToolsCheck",
        "NoGradEvalCheck",
        "GradsToNoneCheck",
        "Safeguard",  # tries what changes the step on the first batch, after every part
        "SpeedupsSummary",
    ]
    assert all(isinstance(cb, Callback) for cb in s.callbacks())


def test_the_tips_catalog_is_the_registry_written_out():
    """`tips` prints lightning_speedups.catalog.ROWS (catalog.json) without importing the records: it must equal them."""
    from lightning_speedups.catalog import ROWS

    assert ROWS == catalog_rows(), "catalog.json is out of date: run python -m lightning_speedups.tips.generate"


def test_the_parts_page_table_is_generated_from_the_records():
    text = PARTS_PAGE.read_text(encoding="utf-8")
    match = re.search(r"<!-- parts-table:start -->\n(.*?)\n<!-- parts-table:end -->", text, re.S)
    assert match, "docs/parts.md lost its parts table markers"
    assert match.group(1).strip() == parts_table().strip(), (
        "docs/parts.md's table is out of date: run python -m lightning_speedups.tips.generate"
    )


def test_the_generator_finds_and_rewrites_what_is_out_of_date(tmp_path, monkeypatch, capsys):
    """Issue 38 item 2: the copies of a tip are written by a script, not kept equal by hand."""
    from lightning_speedups.tips import generate

    assert generate.main(["--check"]) == 0, capsys.readouterr().out  # the checkout's files are current
    catalog, page, t16 = tmp_path / "catalog.json", tmp_path / "parts.md", tmp_path / "t16_conv_bias.py"
    catalog.write_text("[]\n")
    page.write_text(PARTS_PAGE.read_text(encoding="utf-8").replace("| T24", "| T99", 1))
    real_t16 = generate.tip_module_path(TIPS[15])
    t16.write_text(real_t16.read_text(encoding="utf-8").replace("Expected gain: fewer", "Expected gain: more", 1))
    real_path = generate.tip_module_path
    monkeypatch.setattr(generate, "CATALOG", catalog)
    monkeypatch.setattr(generate, "PARTS_PAGE", page)
    monkeypatch.setattr(generate, "tip_module_path", lambda tip: t16 if tip.id == "T16" else real_path(tip))
    assert generate.stale() == [catalog, t16, page] and generate.main(["--check"]) == 1
    assert generate.main([]) == 0 and generate.stale() == []
    assert json.loads(catalog.read_text()) == [list(row) for row in catalog_rows()]
    assert page.read_text(encoding="utf-8") == PARTS_PAGE.read_text(encoding="utf-8")
    assert t16.read_text(encoding="utf-8") == real_t16.read_text(encoding="utf-8")  # the card written from the record


def test_tips_command_lists_every_tip(capsys):
    from lightning_speedups.cli import main

    assert main(["tips"]) == 0
    out = capsys.readouterr().out
    for tip in TIPS:
        assert tip.id in out


def test_adding_a_tip_is_one_record(monkeypatch, tmp_path):
    """A new tip is added as docs/development.md says (its record, its part, a row of PHASES, its name in TIPS) and
    that is all it takes: its setting, Trainer argument, callback (at its phase), bench variant and check appear in
    the generated section, the callback list, bench and the doctor; the generator writes its card into its module's
    docstring, its row of the tips table and of the parts page."""
    import lightning_speedups.config as config_mod
    import lightning_speedups.tips as tips_mod
    from lightning_speedups.callbacks import SpeedupCallback
    from lightning_speedups.inspection import Finding

    class Marker(SpeedupCallback):
        tip = "T25"
        part = "marker"

    def kwargs(s, ctx: BuildContext) -> None:
        if s.marker:
            ctx.trainer_kwargs["log_every_n_steps"] = 7

    new = Tip(
        id="T25",
        slug="marker",
        title="a test tip",
        seeds=("-",),
        claim="-",
        does="marks",
        gain="none",
        hurts="never",
        check=lambda facts: Finding.ok("T25", "checked"),
        settings=(Setting("marker", bool, False, doc="T25. Mark the run."),),
        trainer_kwargs=kwargs,
        callbacks=lambda s, ctx: [(at("marker"), Marker())] if s.marker else [],
        parts=(Marker,),
        bench=BenchVariant({"marker": True}),
    )
    monkeypatch.setitem(PHASES, "marker", 55)  # between conv_bias (50) and channels_last (60)
    monkeypatch.setattr(tips_mod, "TIPS", (*TIPS, new))
    monkeypatch.setattr(config_mod, "TIPS", (*TIPS, new))
    cls, _ = config_mod._generate()
    s = cls(marker=True, conv_bias=True, channels_last=True)
    assert s.active_parts() == {"marker", "conv_bias", "channels_last"}
    assert s.trainer_kwargs()[0] == {"log_every_n_steps": 7}
    assert [type(cb).__name__ for cb in s.callbacks()] == [
        "ConvBiasRemoval",
        "Marker",
        "ChannelsLast",
        "Safeguard",  # tries what changes the step on the first batch, after every part
        "SpeedupsSummary",
    ]
    assert PACK_SETTINGS[-1].path == "summary"

    from lightning_speedups.tips import generate

    module = tmp_path / "t25_marker.py"
    module.write_text('"""T25 marker: a test tip.\n\nCard:\n    (written by the generator)\n"""\n')
    real_path = generate.tip_module_path
    monkeypatch.setattr(generate, "TIPS", (*TIPS, new))
    monkeypatch.setattr(generate, "tip_module_path", lambda tip: module if tip.id == "T25" else real_path(tip))
    monkeypatch.setattr(generate, "CATALOG", tmp_path / "catalog.json")
    monkeypatch.setattr(generate, "PARTS_PAGE", tmp_path / "parts.md")
    (tmp_path / "parts.md").write_text(PARTS_PAGE.read_text(encoding="utf-8"))
    assert generate.main([]) == 0 and generate.stale() == []
    assert new.card() in module.read_text() and "(written by the generator)" not in module.read_text()
    assert any(row[0] == "T25" for row in json.loads((tmp_path / "catalog.json").read_text()))
    assert "T25" in (tmp_path / "parts.md").read_text() and "T25" not in PARTS_PAGE.read_text(encoding="utf-8")


def test_each_tip_card_is_written_once_in_its_record():
    """Issue 30: a card was written three times (record, callback, function) and the copies disagreed (T24:
    "1.2x on a small CNN on CPU" / "little in fp32 or on CPU" / "about neutral in fp32"). The record states it;
    the tip module's docstring is generated from it (tips/generate.py); no part's docstring restates a gain or a
    cost."""
    import importlib
    import inspect
    import re

    claims = re.compile(r"\b(Expected gain|When it hurts|Seed tips?:)")
    for tip in TIPS:
        module = importlib.import_module(tip.check.__module__)
        assert tip.card() in (module.__doc__ or ""), (
            f"{module.__name__}: run python -m lightning_speedups.tips.generate"
        )
        for part in tip.parts:
            home = importlib.import_module(part.__module__)
            docs = [(part.__qualname__, inspect.getdoc(part))]
            if home is not module:  # a part defined in the tip's own module shares its (generated) docstring
                docs.append((home.__name__, home.__doc__))
            for where, doc in docs:
                found = claims.search(doc or "")
                assert not found, f"{tip.id}: {where} restates the card ({found.group(0)}): point to the record"


def test_a_callback_refuses_what_its_record_refuses_at_every_declared_bound():
    """Issue 30: a range is declared once, in the record; a callback that checks the same argument must draw the
    line at the same place (range_test_steps was >= 10 in the record and >= 5 in LRSchedule; div_factor,
    final_div_factor and base_lr were refused at 0 by the record and taken by the callback)."""
    import dataclasses
    import inspect

    from lightning_speedups.callbacks.base import SpeedupCallback

    checked, differ = 0, []
    for tip in TIPS:
        for setting in tip.settings:
            if not dataclasses.is_dataclass(setting.type):
                continue
            for field in dataclasses.fields(setting.type):
                bounds = field.metadata.get("bounds")
                if bounds is None or "list" in str(field.type):
                    continue
                for part in tip.parts:
                    if not (inspect.isclass(part) and issubclass(part, SpeedupCallback)):
                        continue
                    if field.name not in inspect.signature(part.__init__).parameters:
                        continue
                    for limit in ("ge", "gt", "le", "lt"):
                        edge = getattr(bounds, limit)
                        if edge is None:
                            continue
                        step = 1 if float(edge).is_integer() else 1e-3
                        for value in (edge - step, edge, edge + step):
                            value = int(value) if float(value).is_integer() and "int" in str(field.type) else value
                            try:
                                part(**{field.name: value})
                                refused = False
                            except ValueError as err:
                                if "multiple" in str(err):  # a rule across two arguments (max_batch_size >= multiple)
                                    continue
                                refused = True
                            checked += 1
                            if refused != (bounds.problem(value) is not None):
                                differ.append(f"{tip.id} {part.__name__}({field.name}={value!r})")
    assert checked >= 20
    assert not differ, "the callback and the record disagree: " + ", ".join(differ)


def test_a_parts_defaults_are_stated_once_in_its_callback():
    """Issue 38 item 2: a settings group restated its callback's parameters (LargestBatch's eight, LRSchedule's
    eleven, three of CompileModules'). A field that is its part's parameter with the same default takes it from the
    callback (``= FROM_PART`` under ``@settings_of(part)``); a field whose default differs on purpose (``None``
    meaning "leave the loader as it is", ``off``) keeps its own. The tip builds the callback from the group
    (``part_kwargs``) instead of naming each setting again."""
    import ast
    import dataclasses
    import importlib
    import inspect

    restated = []
    derived = 0
    for tip in TIPS:
        module = importlib.import_module(tip.check.__module__)
        tree = ast.parse(inspect.getsource(module))
        for setting in tip.settings:
            group = setting.type
            if not (inspect.isclass(group) and dataclasses.is_dataclass(group)):
                continue
            node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == group.__name__)
            source = {
                s.target.id: ast.unparse(s.value)
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None
            }
            for part in tip.parts:
                if not inspect.isclass(part) or part is group:
                    continue
                params = inspect.signature(part).parameters
                for f in dataclasses.fields(group):
                    param = params.get(f.name)
                    if param is None or param.default is inspect.Parameter.empty:
                        continue
                    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                    if "FROM_PART" in source.get(f.name, ""):
                        derived += 1
                        assert default == param.default
                    elif default == param.default:
                        restated.append(f"{tip.id} {group.__name__}.{f.name} (= {part.__name__}'s {f.name})")
    assert not restated, "declare these = FROM_PART under @settings_of(<part>):\n" + "\n".join(restated)
    assert derived >= 20  # the check saw the groups it guards
