"""Role model on a sandbox host: converted layout, manifest, config, and the model really loads."""

from __future__ import annotations

import json

PY = "/opt/model-venv/bin/python"
DEMO = "/srv/models/demo-gptoss-legacy"
DEMO_SRC = "/srv/models/demo-gptoss-legacy-src"
CTRL = "/srv/models/ctrl-legacy"


def _json(host, path):
    f = host.file(path)
    assert f.exists, path
    return json.loads(f.content_string)


def test_demo_source_is_legacy_format(host):
    cfg = _json(host, f"{DEMO_SRC}/config.json")
    assert cfg["architectures"] == ["GPTOSSForCausalLM"]
    assert "custom_rope_theta" in cfg and "rope_theta" not in cfg
    index = _json(host, f"{DEMO_SRC}/pytorch_model.bin.index.json")
    assert len(set(index["weight_map"].values())) == 8
    assert host.file(f"{DEMO_SRC}/tokenizer.model").exists
    assert not host.file(f"{DEMO_SRC}/tokenizer.json").exists


def test_demo_converted_layout(host):
    cfg = _json(host, f"{DEMO}/config.json")
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["model_type"] == "llama"
    assert cfg["rope_theta"] == 1000000
    assert cfg["head_dim"] == 32
    index = _json(host, f"{DEMO}/model.safetensors.index.json")
    shards = set(index["weight_map"].values())
    assert shards == {"model-00001-of-00001.safetensors"}
    assert len(index["weight_map"]) == 3 + 9 * 2  # embed, norm, lm_head + 9 per layer
    for name in (
        "tokenizer.json",
        "tokenizer.model",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    ):
        assert host.file(f"{DEMO}/{name}").exists, name
    assert host.file("/srv/models/demo.model_dir").content_string.strip() == DEMO


def test_manifest_hashes_match(host):
    for root in (DEMO, CTRL):
        manifest = _json(host, f"{root}/model_convert_manifest.json")
        assert manifest["tool"] == "instinct.vllm.model_convert"
        assert manifest["source"]["format"] == "bin"
        for rel, info in manifest["files"].items():
            f = host.file(f"{root}/{rel}")
            assert f.size == info["size"], rel
            assert f.sha256sum == info["sha256"], rel


def test_controller_source_float16_shards(host):
    manifest = _json(host, f"{CTRL}/model_convert_manifest.json")
    assert manifest["options"]["dtype"] == "float16"
    index = _json(host, f"{CTRL}/model.safetensors.index.json")
    assert len(set(index["weight_map"].values())) > 1
    script = (
        "import json, sys; from safetensors import safe_open;"
        "f = safe_open(sys.argv[1], 'pt');"
        "print(json.dumps(sorted({f.get_slice(k).get_dtype() for k in f.keys()})))"
    )
    header = host.run(f'{PY} -c "{script}" {CTRL}/model-00001-of-*.safetensors')
    assert header.rc == 0, header.stderr
    assert json.loads(header.stdout) == ["F16"]


def test_native_checkpoint_verified_not_converted(host):
    assert host.file("/srv/models/native.model_dir").content_string.strip() == DEMO
    assert not host.file("/srv/models/native").exists


def test_converted_model_generates_with_transformers(host):
    script = (
        "import sys, torch;"
        "from transformers import AutoModelForCausalLM, AutoTokenizer;"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1]);"
        "m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32);"
        "ids = tok.apply_chat_template([{'role': 'user', 'content': 'Hello'}],"
        " add_generation_prompt=True, return_tensors='pt', return_dict=True)['input_ids'];"
        "out = m.generate(ids, max_new_tokens=5, do_sample=False);"
        "print(type(m).__name__, out.shape[1] - ids.shape[1])"
    )
    result = host.run(f'{PY} -c "{script}" {DEMO}')
    assert result.rc == 0, result.stderr
    assert result.stdout.split() == ["LlamaForCausalLM", "5"]


SECRETS = ("pw-s3cret-1", "t0k-s3cret-2", "hdr-s3cret-3")


def test_url_source_downloaded_unpacked_and_converted(host):
    cfg = _json(host, "/srv/models/url-legacy/config.json")
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    archive = host.file("/srv/models/.downloads/url-legacy-legacy.tar")
    assert archive.exists and archive.sha256sum == host.file("/srv/www/legacy.tar").sha256sum
    assert not host.file("/srv/models/.downloads/url-legacy-legacy.tar.part").exists
    progress = _json(host, "/srv/models/.downloads/url-legacy-legacy.tar.progress.json")
    assert progress["done"] == progress["total"] == archive.size
    convert = _json(host, "/srv/models/.url-legacy.convert-progress.json")
    assert convert["phase"] == "convert" and convert["done"] == convert["total"] > 0


def test_failed_download_says_why_without_secrets(host):
    msg = host.file("/srv/models/missing.failure").content_string
    assert "HTTP 404" in msg and "127.0.0.1:8765/missing.tar" in msg, msg
    for secret in SECRETS:
        assert secret not in msg, msg
    assert not host.file("/srv/models/.downloads/missing-missing.tar").exists
