"""The figure pack, the files it draws and the share store, without a browser: on the default model's recorded
trace (assets/smollm2/traces/, no model run) and on hostile input."""

import copy
import io
import json
import xml.etree.ElementTree as ElementTree
import zipfile
from types import SimpleNamespace

import pytest
from PIL import Image

from app.drawing import Canvas
from app.export import FIGURES, figure_pack, pack_name, pass_figures
from app.figure_files import draw
from app.render import selected_span, selection_html
from app.race import Piece, SideView
from app.trace_store import TraceStore, valid_id
from helpers import component, handler
from hostile import PAYLOAD, deep_json, html_everywhere
from specstream_core.decoding.trace import load_trace, validate
from specstream_core.errors import SpecstreamError

RECORDED = "assets/smollm2/traces/math-my-kid-is-stuck-on-this-one-can-you-walk-us-thr.json"


@pytest.fixture(scope="module")
def recorded():
    return load_trace(RECORDED)


def opens(name: str, data: bytes):
    """A file of the pack, opened: a decoded PNG image or a parsed SVG element."""
    if name.endswith(".png"):
        img = Image.open(io.BytesIO(data))
        img.load()
        return img
    root = ElementTree.fromstring(data)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def test_pack_holds_every_figure_and_every_file_opens(recorded):
    index = 5
    blob = figure_pack(recorded, index)
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        names = sorted(z.namelist())
        assert names == sorted([f"pass-005/{f}.{e}" for f in FIGURES for e in ("svg", "png")] + ["pass-005/about.json"])
        about = json.loads(z.read("pass-005/about.json"))
        assert about["pass"] == index and about["passes"] == len(recorded["steps"])
        assert about["attention_head"] == "mean" and about["attention_layer"] is not None
        for name in names:
            if name.endswith(".json"):
                continue
            shown = opens(name, z.read(name))
            if name.endswith(".png"):  # drawn at 2x the figure: the width the page gives it, doubled
                assert shown.width == 2000 and shown.height >= 700, name
                assert len(shown.convert("L").getcolors(maxcolors=2**16) or range(99)) > 8, f"{name} is blank"
        tree_svg = z.read("pass-005/tree.svg").decode()
    step = recorded["steps"][index]
    # the tree's file names the pass and shows each node's token
    assert "pass 5" in tree_svg
    for node in step["nodes"]:
        assert ElementTree.fromstring(tree_svg) is not None
        text = (node.get("text") or "").replace(" ", "␣").replace("\n", "↵")
        if text.strip():
            assert text.replace("&", "&amp;").replace("<", "&lt;") in tree_svg, text


def test_the_selected_pass_is_marked_on_the_tau_chart_file(recorded):
    marked = draw(pass_figures(recorded, 7)["acceptance"]).to_svg()
    other = draw(pass_figures(recorded, 9)["acceptance"]).to_svg()
    assert marked != other and 'stroke="#1f5fa8"' in marked  # the selected pass's line, in the lab's blue


def test_pack_of_the_prefill_pass_and_of_the_last(recorded):
    for index in (0, len(recorded["steps"]) - 1):
        with zipfile.ZipFile(io.BytesIO(figure_pack(recorded, index))) as z:
            for name in z.namelist():
                if not name.endswith(".json"):
                    opens(name, z.read(name))
    assert pack_name(recorded, 3).endswith("-pass3.zip") and "/" not in pack_name({"meta": {"model": "../x"}}, 1)


def test_pack_refuses_bad_input_in_one_line(recorded):
    for index in (-1, len(recorded["steps"]), 2.5, "3", None):
        with pytest.raises(SpecstreamError):
            figure_pack(recorded, index)
    for bad in ({}, {"schema": "specstream-trace", "version": 99}, [], "x"):
        with pytest.raises(SpecstreamError):
            figure_pack(bad, 0)


def test_hostile_text_stays_text_in_every_file(recorded):
    hostile = load_trace(json.dumps(html_everywhere(copy.deepcopy(recorded))).encode())
    with zipfile.ZipFile(io.BytesIO(figure_pack(hostile, 3))) as z:
        for name in z.namelist():
            data = z.read(name)
            if name.endswith(".svg"):
                root = opens(name, data)
                assert not any(el.tag.endswith(("img", "script", "foreignObject")) for el in root.iter()), name
                assert "<img" not in data.decode()
            elif name.endswith(".png"):
                opens(name, data)


def test_canvas_writes_the_same_shapes_to_svg_and_png():
    c = Canvas(120, 80)
    c.rect(10, 10, 50, 30, "rgb(8,48,107)")
    c.line([(0, 70), (120, 70)], "#ff9f1c", 2, "dash")
    c.marker(90, 30, "star", 20, "#ff9f1c")
    c.marker(90, 60, "circle", 12, "rgba(0,0,0,0)", "#1f5fa8", 3)  # a hollow ring
    c.text(60, 5, "τ ␣ <b>&", 10, angle=30)
    root = opens("c.svg", c.to_svg().encode())
    assert [el.tag.split("}")[1] for el in root] == ["rect", "rect", "polyline", "polygon", "circle", "text"]
    assert root[-1].text == "τ ␣ <b>&"
    img = opens("c.png", c.to_png(scale=1)).convert("RGB")
    assert img.size == (120, 80)
    assert img.getpixel((30, 25)) == (8, 48, 107) and img.getpixel((5, 5)) == (255, 255, 255)
    assert img.getpixel((90, 60)) == (255, 255, 255)  # the ring's middle is not filled


# ---- the share store ---------------------------------------------------------------------------
def test_store_round_trip_and_one_id_per_trace(recorded):
    store = TraceStore()
    trace_id = store.put(recorded)
    assert valid_id(trace_id) and len(trace_id) == 16
    assert store.get(trace_id) == recorded
    assert store.put(copy.deepcopy(recorded)) == trace_id and len(store) == 1  # the same trace: the same link
    other = copy.deepcopy(recorded)
    other["stats"]["wall_s"] = 1.0
    assert store.put(other) != trace_id and len(store) == 2


def test_store_is_bounded_in_count_and_bytes(recorded):
    def variant(k):
        t = copy.deepcopy(recorded)
        t["stats"]["wall_s"] = float(k)
        return t

    store = TraceStore(max_traces=2)
    a, b = store.put(variant(1)), store.put(variant(2))
    store.get(a)  # opened: now the most recent
    c = store.put(variant(3))
    assert len(store) == 2 and store.get(a) and store.get(c)
    with pytest.raises(SpecstreamError, match="no longer kept"):
        store.get(b)
    size = len(load_trace(variant(1)).pack())
    store = TraceStore(max_traces=100, max_bytes=int(size * 2.5))
    ids = [store.put(variant(k)) for k in range(5)]
    assert len(store) == 2 and store.bytes <= size * 2.5
    assert store.get(ids[-1]) and store.get(ids[-2])
    with pytest.raises(SpecstreamError, match="too large"):
        TraceStore(max_bytes=size // 2).put(recorded)


def test_store_checks_ids_and_traces_as_hostile_input(recorded):
    store = TraceStore()
    store.put(recorded)
    for bad in ("", "../../etc/passwd", "A" * 15, "A" * 17, "AAAAAAAAAAAAAAA/", "ÄAAAAAAAAAAAAAAA", None, 123,
                ["AAAAAAAAAAAAAAAA"], "AAAAAAAAAAAAAAAA\n"):
        with pytest.raises(SpecstreamError, match="not a valid trace link"):
            store.get(bad)
    with pytest.raises(SpecstreamError, match="no longer kept"):
        store.get("AAAAAAAAAAAAAAAA")
    for bad in ({}, [], PAYLOAD, {"schema": "specstream-trace", "version": 1, "steps": "x"}, deep_json(5000)):
        with pytest.raises(SpecstreamError):
            store.put(bad)
    assert len(store) == 1


# ---- the page's handlers (no browser) ----------------------------------------------------------
def request(**query):
    return SimpleNamespace(query_params=query, headers={}, client=SimpleNamespace(host="127.0.0.1"),
                           session_hash="tab-1")


def test_share_link_reopens_the_trace_and_refuses_bad_links(replay_demo, recorded):
    share, open_page = handler(replay_demo, "on_share"), handler(replay_demo, "on_open")
    link = share(recorded.pack())[component(replay_demo, "share-link")]
    assert link.startswith("?trace=")
    shown = list(open_page(None, request(trace=link[len("?trace="):])))[-1]
    assert "shared trace" in shown[component(replay_demo, "lab-message")]
    assert "sel-pass" in shown[component(replay_demo, "ss-output")]
    assert shown[component(replay_demo, "trace-download")]["value"].endswith(".json")
    for bad, why in (("nope", "not a valid trace link"), ("B" * 16, "no longer kept")):
        out = list(open_page(None, request(trace=bad)))[-1]
        assert why in out[component(replay_demo, "lab-message")]


def test_selected_pass_in_both_texts():
    ss = SideView([Piece("The", 0), Piece(" cat", 1), Piece(" sat", 1), Piece(" down", 2)])
    same, other = SideView([Piece("The cat sat down", 0)]), SideView([Piece("The dog sat down", 0)])
    assert selected_span(same, ss, 1) == (3, 11) and selected_span(other, ss, 1) is None
    shown = selection_html(same, ss, 1)
    assert '<span class="tok sel-pass"' in shown["ar_out"] and ">&nbsp;cat sat<" not in shown["ar_out"]
    assert "> cat sat</span>" in shown["ar_out"]
    assert shown["ss_out"].count("sel-pass") == 2
    assert "sel-pass" not in selection_html(other, ss, 1)["ar_out"]
    # a pass across a line break: each line outlined on its own, a lone line break marked without an outline
    ss = SideView([Piece("Sure:", 0), Piece("\n\n", 1), Piece("```", 1), Piece("\n", 2)])
    plain = SideView([Piece("Sure:\n\n```\n", 0)])
    shown = selection_html(plain, ss, 1)
    assert '\n\n<span class="tok sel-pass" title=' in shown["ar_out"] and shown["ar_out"].count("sel-pass") == 1
    assert shown["ss_out"].count("sel-pass nl") == 1 and shown["ss_out"].count("sel-pass") == 2
    assert "sel-pass nl" in selection_html(plain, ss, 2)["ar_out"]


def test_every_way_a_trace_opens_sets_every_output_of_the_page(replay_demo, recorded, tmp_path):
    """A shared link, a recorded run, an upload and a preset each give a value to every output they are wired to
    (the race's lanes and lane picker included), so nothing of an earlier race is left on the page."""
    from app.presets import presets, trace_path

    def wired(name):
        return {id(b) for b in next(f for f in replay_demo.fns.values() if getattr(f.fn, "__name__", "") == name).outputs}

    label = next(k for k in presets() if trace_path(k))
    link = handler(replay_demo, "on_share")(recorded.pack())[component(replay_demo, "share-link")]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(recorded))
    opened = {"on_open": list(handler(replay_demo, "on_open")(None, request(trace=link[len("?trace="):])))[-1],
              "recorded": list(handler(replay_demo, "on_open")(label, request()))[-1],
              "on_upload": handler(replay_demo, "on_upload")(str(path)),
              "on_preset": handler(replay_demo, "on_preset")(label)}
    for name, out in opened.items():
        assert {id(b) for b in out} == wired("on_open" if name == "recorded" else name), name
    assert "lanes" not in opened["on_upload"][component(replay_demo, "lane-outputs")]  # no race's lanes left


def test_the_pack_and_the_link_name_the_lane_they_show(replay_demo, recorded):
    lane = copy.deepcopy(recorded)
    lane["meta"].setdefault("lab", {})["lane"] = "teaching"
    lane = validate(lane)
    assert "-teaching-pass3.zip" in pack_name(lane, 3) and "-teaching-" not in pack_name(recorded, 3)
    with zipfile.ZipFile(io.BytesIO(figure_pack(lane, 3))) as z:
        assert json.loads(z.read("pass-003/about.json"))["lane"].endswith("teaching draft")
    shared = handler(replay_demo, "on_share")(lane.pack())
    assert "teaching draft" in shared[component(replay_demo, "lab-message")]
    shown = list(handler(replay_demo, "on_open")(None, request(trace=shared[component(replay_demo, "share-link")][7:])))
    assert shown[-1][component(replay_demo, "ss-heading")].endswith("teaching draft")
