"""The JSON API (FastAPI's TestClient): its numbers are the simulator's, and bad input is a 4xx, never a 500."""

from __future__ import annotations

import csv
import io
import json
import tomllib

import pytest
from page_helpers import ACCEPTANCE, MODEL, PLATFORM, require_modules

from hwmodels.loader import get_platform, load_platform_file
from sim.acceptance import preset_dir
from sim.acceptance_loader import load_acceptance
from sim.commands.predict import describe_config
from sim.model_spec import get_model
from sim.optimizer import optimize
from sim.strategies.base import Problem
from sim.whatif import WhatIf, scale_platform

require_modules("fastapi", "httpx")

from fastapi.testclient import TestClient  # noqa: E402

from web.app import create_app  # noqa: E402
from web.uploads import MAX_UPLOAD_BYTES  # noqa: E402

QUERY = {"model": MODEL, "platform": PLATFORM, "acceptance": ACCEPTANCE, "methods": ["medusa", "chain"]}
GOOD_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
               "intermediate_size": 1376, "num_attention_heads": 8, "num_key_value_heads": 8,
               "num_hidden_layers": 4, "vocab_size": 2048, "max_position_embeddings": 1024,
               "torch_dtype": "float16", "hetspec_name": "tiny-upload"}


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app())


def problem(**whatif) -> Problem:
    return Problem(get_model(MODEL), scale_platform(get_platform(PLATFORM), WhatIf(**whatif)),
                   load_acceptance(ACCEPTANCE))


def test_options_list_the_presets(client):
    r = client.get("/api/options")
    assert r.status_code == 200
    o = r.json()
    assert MODEL in o["models"] and PLATFORM in o["platforms"] and ACCEPTANCE in o["acceptances"]
    assert "hcmp" in o["methods"] and o["uploaded_models"] == []


def test_the_page_and_its_scripts_are_served(client):
    assert "HetSpec what-if" in client.get("/").text
    assert client.get("/static/app.js").status_code == 200
    js = client.get("/static/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 100_000
    assert client.get("/static/../app.py").status_code == 404


def test_the_best_configuration_is_predicts(client):
    r = client.post("/api/answer", json=QUERY)
    assert r.status_code == 200, r.text
    a = r.json()
    expect = optimize(problem(), "medusa").best
    (row,) = a["rows"]
    assert row["method"] == "medusa" and row["config"] == describe_config(expect)
    assert row["tokens_per_s"] == pytest.approx(expect["tokens_per_s"], rel=1e-12)
    assert row["speedup_vs_ar"] == pytest.approx(expect["speedup_vs_ar"], rel=1e-12)
    assert [u["method"] for u in a["unavailable"]] == ["chain"]
    assert "draft_alpha" in a["unavailable"][0]["reason"]
    assert a["verdict"]["best"] == "medusa" and a["verdict"]["pays"]
    width = a["curves"]["medusa"]["tree_width"]
    assert max(width["y"]) == pytest.approx(row["tokens_per_s"]) and width["best_x"] == row["tree_width"]
    roof = a["roofline"]
    assert roof["device"] == expect["device"] and roof["tokens"] == expect["tree_width"]
    assert {o["bound"] for o in roof["ops"]} <= {"compute", "memory", "overhead", "measured"}


def test_a_what_if_moves_the_answer_as_the_simulator_does(client):
    a = client.post("/api/answer", json={**QUERY, "mem_bw": 2.0}).json()
    expect = optimize(problem(mem_bw=2.0), "medusa").best
    assert a["rows"][0]["tokens_per_s"] == pytest.approx(expect["tokens_per_s"], rel=1e-12)
    assert a["rows"][0]["tokens_per_s"] > optimize(problem(), "medusa").best["tokens_per_s"]
    assert "mem bw x2" in a["platform"]


def test_it_says_when_speculation_does_not_pay(client):
    a = client.post("/api/answer", json={"model": "tinyllama-1.1b", "platform": "h100-sxm",
                                         "acceptance": "alpha:0.05", "methods": ["ar", "chain"]}).json()
    assert a["verdict"]["best"] == "ar" and not a["verdict"]["pays"]
    assert a["verdict"]["text"].startswith("Speculation does not pay on this box")


def test_when_no_chosen_method_can_run_it_says_why(client):
    r = client.post("/api/answer", json={**QUERY, "methods": ["chain", "dovetail"]})
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["rows"] == [] and a["roofline"] is None and a["verdict"]["best"] is None
    assert [u["method"] for u in a["unavailable"]] == ["chain", "dovetail"]
    assert client.post("/api/table.csv", json={**QUERY, "methods": ["chain"]}).status_code == 400


def test_downloads_are_the_simulators_tables_platform_and_trace(client, tmp_path):
    body = {**QUERY, "methods": ["medusa"], "link_bw": 0.5, "mem_bw": 2.0}
    rows = list(csv.DictReader(io.StringIO(client.post("/api/table.csv", json=body).text)))
    expect = optimize(problem(link_bw=0.5, mem_bw=2.0), "medusa")
    assert len(rows) == expect.rows and {r["method"] for r in rows} == {"medusa"}
    assert max(float(r["tokens_per_s"]) for r in rows) == pytest.approx(expect.best["tokens_per_s"])
    toml = client.post("/api/platform.toml", json=body).text
    path = tmp_path / "scaled.toml"
    path.write_text(toml)
    scaled, base = load_platform_file(path), get_platform(PLATFORM)
    assert scaled.device("gpu").mem_bw_gbps == pytest.approx(2 * base.device("gpu").mem_bw_gbps)
    assert "what-if" in tomllib.loads(toml)["devices"]["gpu"]["mem_bw_gbps"]["source"]
    trace = client.post("/api/trace.json", json=body).json()
    phases = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert phases and max(e["args"]["step"] for e in phases) == 19


def test_an_uploaded_config_is_read_as_the_cli_reads_it(client):
    r = client.post("/api/upload", params={"kind": "model", "filename": "config.json"},
                    content=json.dumps(GOOD_CONFIG).encode())
    assert r.status_code == 200, r.text
    up = r.json()
    assert up["id"].startswith("upload:") and up["name"] == "tiny-upload"
    assert {"id": up["id"], "name": "tiny-upload"} in client.get("/api/options").json()["uploaded_models"]
    a = client.post("/api/answer", json={"model": up["id"], "platform": PLATFORM, "methods": ["ar"]}).json()
    assert a["model"] == "tiny-upload" and a["rows"][0]["tokens_per_s"] > 0


def test_a_gguf_header_upload_is_priced_as_the_whole_file_is(client, smollm2_gguf):
    """The page sends a GGUF file's first MAX_UPLOAD_BYTES: the header and tensor table give the same spec,
    weights at their stored sizes, as ``--model FILE.gguf``; a cut inside the header is one line."""

    data = smollm2_gguf.read_bytes()[:MAX_UPLOAD_BYTES]
    r = client.post("/api/upload", params={"kind": "model", "filename": smollm2_gguf.name}, content=data)
    assert r.status_code == 200, r.text
    whole = get_model(str(smollm2_gguf))
    a = client.post("/api/answer", json={"model": r.json()["id"], "platform": PLATFORM, "methods": ["ar"]}).json()
    direct = optimize(Problem(model=whole, platform=get_platform(PLATFORM), acceptance=problem().acceptance), "ar")
    assert a["model"] == whole.name and a["rows"][0]["tokens_per_s"] == pytest.approx(direct.best["tokens_per_s"])
    cut = client.post("/api/upload", params={"kind": "model", "filename": "cut.gguf"}, content=data[:100_000])
    assert cut.status_code == 400 and "truncated GGUF header" in cut.json()["error"]
    assert len(cut.json()["error"].splitlines()) == 1


def test_an_uploaded_acceptance_profile_is_a_choice(client):
    data = (preset_dir() / "ghidorah-mbpp.json").read_bytes()
    r = client.post("/api/upload", params={"kind": "acceptance", "filename": "mine.json"}, content=data)
    assert r.status_code == 200, r.text
    a = client.post("/api/answer", json={"model": MODEL, "platform": PLATFORM, "acceptance": r.json()["id"],
                                         "methods": ["medusa"]}).json()
    assert a["rows"][0]["tokens_per_s"] == pytest.approx(optimize(problem(), "medusa").best["tokens_per_s"])


@pytest.mark.parametrize("body, status, match", [
    ({**QUERY, "model": "no-such-model"}, 400, "unknown model 'no-such-model'"),
    ({**QUERY, "platform": "no-such-box"}, 400, "unknown platform 'no-such-box'"),
    ({**QUERY, "acceptance": "no-such-table"}, 400, "unknown acceptance model 'no-such-table'"),
    ({**QUERY, "methods": ["warp"]}, 400, "unknown method 'warp'"),
    ({**QUERY, "methods": []}, 400, "choose at least one method"),
    ({**QUERY, "model": "/etc/hostname"}, 400, "unknown model '/etc/hostname'"),
    ({**QUERY, "acceptance": "../sim/presets/acceptance/medusa-log.json"}, 400, "unknown acceptance model"),
    ({**QUERY, "mem_bw": 1000.0}, 400, "what-if scale mem_bw must be a number in [0.1, 10]"),
    ({**QUERY, "peak_flops": 0.0}, 400, "what-if scale peak_flops must be"),
    ({**QUERY, "link_bw": -1}, 400, "what-if scale link_bw must be"),
    ({**QUERY, "acceptance_scale": 11}, 400, "what-if scale acceptance must be"),
    ({**QUERY, "acceptance": "alpha:1.5"}, 400, "alpha must be in [0, 1)"),
    ({**QUERY, "context": -5}, 400, "context must be an integer >= 0"),
    ({**QUERY, "context": 10**7}, 400, "exceed model vicuna-7b's max_position"),
    ({**QUERY, "batch": 0}, 400, "batch must be an integer >= 1"),
    ({**QUERY, "dtype": "fp7"}, 400, "fp7"),
    ({**QUERY, "context": "lots"}, 422, "context:"),
    ({**QUERY, "mem_bw": "fast"}, 422, "mem_bw:"),
    ({"platform": PLATFORM}, 422, "model: Field required"),
])
def test_bad_controls_are_a_4xx_with_one_line(client, body, status, match):
    r = client.post("/api/answer", json=body)
    assert r.status_code == status, r.text
    message = r.json()["error"]
    assert match in message and "\n" not in message and "Traceback" not in message


def test_a_body_that_is_not_json_is_a_422(client):
    r = client.post("/api/answer", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "JSON" in r.json()["error"]


@pytest.mark.parametrize("params, data, status, match", [
    ({"kind": "model", "filename": "config.json"}, b'{"hidden_size": ', 400, "config.json: json: not valid JSON"),
    ({"kind": "model", "filename": "config.json"}, b'{"hidden_size": 64}', 400, "config.json"),
    ({"kind": "model", "filename": "config.json"}, b"", 400, "the file is empty"),
    ({"kind": "model", "filename": "config.json"}, b"[1, 2]", 400, "top level must be an object"),
    ({"kind": "model", "filename": "model.gguf"}, b"GGUF\x03\x00\x00\x00" + bytes(64), 400, "model.gguf"),
    ({"kind": "acceptance", "filename": "profile.json"}, b'{"format": "x"}', 400, "profile.json: format"),
    ({"kind": "weights", "filename": "config.json"}, b"{}", 400, "kind 'weights' unknown"),
    ({"kind": "model"}, b"{}", 422, "filename: Field required"),
    ({"kind": "model", "filename": "config.json"}, b" " * (MAX_UPLOAD_BYTES + 1), 413, "bytes read"),
])
def test_a_malformed_upload_is_a_4xx_with_one_line(client, params, data, status, match):
    r = client.post("/api/upload", params=params, content=data)
    assert r.status_code == status, r.text
    message = r.json()["error"]
    assert match in message and "\n" not in message and "hetspec-upload-" not in message
