#!/usr/bin/env python3
"""Hugging Face interop of `ckptctl export --select model` (tests/python/t-python-hf.sh; the torch2
virtual environment, with transformers and safetensors).  Small models built from configs (no
hub download): a Llama (untied) and a GPT-2 (tied input and output embeddings).

- Store.save({"model": model, ...}) in one process; ckptctl export --select model into a
  directory with the model's config.json: safetensors' own reader (safetensors.torch.load_file,
  the oracle) gives every tensor of model.state_dict() bit for bit, and
  AutoModelForCausalLM.from_pretrained(directory) gives the same weights and the same logits.
- The same for a Llama trained under FSDP2 on 2 gloo ranks and saved by dcp.save through
  libckpt.dcp: the exported tensors are the consolidated (full) state dict.
"""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fsdp2_common import ROOT, entry, init_rank, run_world  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "python"))

CKPTCTL = os.path.join(ROOT, os.environ.get("B", "build"), "bin", "ckptctl")


def llama_config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                       tie_word_embeddings=False)


def gpt2_config():
    from transformers import GPT2Config
    return GPT2Config(vocab_size=100, n_positions=32, n_embd=48, n_layer=2, n_head=4,
                      tie_word_embeddings=True)


def export(store, step, outdir, cfg):
    os.makedirs(outdir, exist_ok=True)
    out = os.path.join(outdir, "model.safetensors")
    p = subprocess.run([CKPTCTL, "export", "--select", "model", "--output", out, store, str(step)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"ckptctl export --select model: exit {p.returncode}: {p.stderr}"
    cfg.save_pretrained(outdir)
    return out


def check_export(out, outdir, ref, what, cfg):
    """safetensors' reader and from_pretrained against the reference state dict `ref`."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    got = load_file(out)
    missing = [k for k in ref if k not in got]
    tied = getattr(cfg, "tie_word_embeddings", False)
    # a tied output embedding is one tensor under two names; a file may carry it once
    assert not missing or (tied and missing == ["lm_head.weight"]), f"{what}: missing {missing}"
    extra = sorted(set(got) - set(ref))
    assert not extra, f"{what}: the export has entries the model lacks: {extra}"
    for k, v in got.items():
        assert v.dtype == ref[k].dtype and torch.equal(v, ref[k]), f"{what}: {k} differs"
    with safe_open(out, framework="pt") as f:
        fmt = (f.metadata() or {}).get("format")
    # as safetensors.torch.save_file writes it: transformers 4.x refuses a file without it
    assert fmt == "pt", f"{what}: the export's __metadata__ format is {fmt!r}, not 'pt'"
    m = AutoModelForCausalLM.from_pretrained(outdir)
    for k, v in m.state_dict().items():
        assert torch.equal(v, ref[k]), f"{what}: from_pretrained: {k} differs"
    ids = torch.arange(12).view(2, 6) % cfg.vocab_size
    return m, ids, fmt, len(got)


def one_process(tmp):
    import torch
    import libckpt
    from transformers import AutoModelForCausalLM
    for name, cfg in (("llama", llama_config()), ("gpt2", gpt2_config())):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg)
        store = os.path.join(tmp, f"{name}-store")
        with libckpt.Store(store, create=True) as st:
            st.save({"model": model, "step": 7, "note": "hf"}, 1)
        outdir = os.path.join(tmp, f"{name}-hf")
        out = export(store, 1, outdir, cfg)
        ref = model.state_dict()
        m, ids, fmt, n = check_export(out, outdir, ref, name, cfg)
        model.eval()
        with torch.no_grad():
            assert torch.equal(m(ids).logits, model(ids).logits), f"{name}: logits differ"
        print(f"ok: {name}: ckptctl export --select model ({n} tensors, format {fmt!r}) reads back "
              f"bit for bit with safetensors.load_file and from_pretrained (same logits)")


def role_fsdp2(rank, world, store, tmp):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_state_dict)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM
    from libckpt.dcp import LibckptStorageWriter
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(llama_config())
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.arange(24).view(4, 6) % 128
    model(ids, labels=ids).loss.backward()
    opt.step()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, storage_writer=LibckptStorageWriter(store),
             checkpoint_id=f"{store}/step-1")
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))
    if rank == 0:
        torch.save(full, os.path.join(tmp, "fsdp2-ref.pt"))


def fsdp2(tmp):
    import torch
    store = os.path.join(tmp, "fsdp2-store")
    run_world(__file__, 2, ["fsdp2", store, tmp])
    outdir = os.path.join(tmp, "fsdp2-hf")
    cfg = llama_config()
    out = export(store, 1, outdir, cfg)
    ref = torch.load(os.path.join(tmp, "fsdp2-ref.pt"))
    _, _, _, n = check_export(out, outdir, ref, "FSDP2 + DCP", cfg)
    print(f"ok: a Llama trained under FSDP2 on 2 ranks, saved by dcp.save into libckpt: ckptctl "
          f"export --select model gives its {n} full tensors; from_pretrained loads them")


def main():
    try:
        import safetensors  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"skip: {e}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        one_process(tmp)
        fsdp2(tmp)
    print("python hf ok")
    return 0


def rank_main(argv):
    import torch.distributed as dist
    r, w, args = init_rank(argv)
    role_fsdp2(r, w, args[1], args[2])
    dist.barrier()
    dist.destroy_process_group()
    print("RESULT ok", flush=True)


if __name__ == "__main__":
    entry(rank_main, main)
