#!/usr/bin/env python3
"""The GPU probe of 2026-11-27 (one start, one script): paraforge's engine
with the fp16 cache, the default batch (256 sentences) with the token
budget from the GPU's free memory, and streams, against transformers'
`generate` fp32 and CTranslate2 (float16, int8_float16) on the same GPU,
and ONNX Runtime's own `BeamSearch`
operator (tools/bench/ort_beam_search.py), 500 held-out sentences, beam 12,
repeats interleaved. Identical-translation counts against transformers
fp32 on this GPU and against paraforge fp32 on the CPU (token-exact with
transformers on the CPU). Writes probe.json into the directory given.

usage: probe.py PARAFORGE OUTDIR [--repeats 2] [--device cuda:0] [--sentences 500]
"""
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools" / "bench"))
import bench_nmt as b  # noqa: E402

P, OUT = sys.argv[1], Path(sys.argv[2])
REPEATS = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 2
DEV = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda:0"
N = int(sys.argv[sys.argv.index("--sentences") + 1]) if "--sentences" in sys.argv else 500
OUT.mkdir(parents=True, exist_ok=True)
M = b.DEMO_CACHE
src = OUT / "input.txt"
sents, _ = b.held_out_sentences(500)
sents = sents[:N]
src.write_text("\n".join(sents) + "\n", encoding="utf-8")
log = lambda *a: print(*a, flush=True)  # noqa: E731

# engine rows: (model dir, extra flags); batch None = the new CUDA default.
rows = {
    "fp32-b64": ("onnx", ["--batch-size", "64"]),
    "fp32-b64-s4": ("onnx", ["--batch-size", "64", "--streams", "4"]),
    "fp32-default": ("onnx", []),
    "fp32-default-s2": ("onnx", ["--streams", "2"]),
    "fp32-default-s4": ("onnx", ["--streams", "4"]),
    "fp32-b128-s4": ("onnx", ["--batch-size", "128", "--streams", "4"]),
    "fp16-b64": ("onnx-fp16", ["--batch-size", "64"]),
    "fp16-default": ("onnx-fp16", []),
    "fp16-default-s2": ("onnx-fp16", ["--streams", "2"]),
    "fp16-default-s4": ("onnx-fp16", ["--streams", "4"]),
    "fp16-b128-s4": ("onnx-fp16", ["--batch-size", "128", "--streams", "4"]),
}


def paraforge(name):
    d, extra = rows[name]
    cmd = [P, "translate", "--model", str(M / d), "--beam", "12", "--threads", "0", "--device", DEV,
           "--timing", "--warmup", "64", str(src), "-o", str(OUT / f"{name}.txt"), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}: {r.stderr[-1500:]}")
    budget = [l for l in r.stderr.splitlines() if "token budget" in l]
    t = b.timing_of(r.stderr)
    return t["seconds"], (OUT / f"{name}.txt").read_text(encoding="utf-8").splitlines(), t, budget


peers, not_run = {}, {}
try:
    import torch
    h = b.HfGpu(torch.float32, DEV, 64)
    h.run(sents[:64])
    peers["transformers-fp32-b64"] = h
except Exception as e:  # noqa: BLE001 - the reason is the result
    not_run["transformers-fp32-b64"] = f"{type(e).__name__}: {e}"
# CTranslate2 on the same GPU, as bench_nmt.py --gpu runs it (max_length
# from generation_config.json, <pad> suppressed), at the benchmark's batch
# and at paraforge's new CUDA default.
gen = json.loads((M / "hf" / "generation_config.json").read_text())
for name, variant, ctype, batch in (("ct2-float16-b64", "ct2-fp16", "float16", 64),
                                    ("ct2-float16-b256", "ct2-fp16", "float16", 256),
                                    ("ct2-int8_float16-b64", "ct2-int8-fp16", "int8_float16", 64)):
    try:
        c = b.Ct2(variant, 4, batch, gen["max_length"], "cuda", ctype, 0)
        c.run(sents[:batch])  # warm-up
        peers[name] = c
    except Exception as e:  # noqa: BLE001 - the reason is the result
        not_run[name] = f"{type(e).__name__}: {e}"
        log(f"NOT RUN {name}: {not_run[name]}")

times = {k: [] for k in list(rows) + list(peers)}
texts, timings, budgets = {}, {}, {}
for rep in range(REPEATS):
    for name in list(rows) + list(peers):
        if name in not_run:
            continue
        try:
            if name in rows:
                secs, out, t, bud = paraforge(name)
                timings[name], budgets[name] = t, bud
            else:
                secs, out = peers[name].run(sents)
        except Exception as e:  # noqa: BLE001
            not_run[name] = f"{type(e).__name__}: {e}"
            log(f"NOT RUN {name}: {not_run[name]}")
            continue
        times[name].append(secs)
        texts[name] = out
        log(f"rep {rep} {name}: {secs:.3f} s")

# ONNX Runtime's BeamSearch operator, built here from the same graphs.
for prec, d in (("fp32", "onnx"), ("fp16", "onnx-fp16")):
    name = f"ort-beam-search-{prec}-b64"
    try:
        g = OUT / f"bs-{prec}.onnx"
        subprocess.run([sys.executable, str(ROOT / "tools/bench/ort_beam_search.py"), "build", str(M / d), str(g)],
                       check=True, timeout=60)
        secs = []
        for rep in range(1):
            r = subprocess.run([sys.executable, str(ROOT / "tools/bench/ort_beam_search.py"), "run", str(g), str(M / "hf"),
                                str(src), str(OUT / f"{name}.txt"), "--device", DEV, "--batch-size", "64"],
                               capture_output=True, text=True, timeout=45)
            if r.returncode != 0:
                raise RuntimeError(r.stderr[-1500:])
            log(r.stdout.strip())
            secs.append(float(r.stdout.split(" sentences in ")[1].split(" s")[0]))
        times[name] = secs
        texts[name] = (OUT / f"{name}.txt").read_text(encoding="utf-8").splitlines()
    except Exception as e:  # noqa: BLE001
        not_run[name] = f"{type(e).__name__}: {e}"
        log(f"NOT RUN {name}: {not_run[name][-800:]}")

ref_gpu = texts.get("transformers-fp32-b64")
cpu_ref_path = ROOT / "docs/bench/gpu-2026-11-27/cpu-fp32-reference.txt"
ref_cpu = cpu_ref_path.read_text(encoding="utf-8").splitlines() if cpu_ref_path.exists() else None
result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "sentences": len(sents), "beam": 12,
          "gpu": subprocess.run("nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader",
                                shell=True, capture_output=True, text=True).stdout.strip(),
          "not_run": not_run, "engines": {}}
base = "fp32-b64"
log("\n| engine | sentences/s (median) | s per repeat | vs paraforge fp32 b64 | identical to transformers fp32 (GPU) | identical to fp32 on the CPU |")
log("|---|---:|---|---:|---:|---:|")
for name, ts in times.items():
    if not ts or name not in texts:
        continue
    med = statistics.median(ts)
    same_gpu = sum(a == c for a, c in zip(texts[name], ref_gpu)) if ref_gpu else None
    same_cpu = sum(a == c for a, c in zip(texts[name], ref_cpu)) if ref_cpu else None
    row = {"seconds": ts, "sentences_per_second": len(sents) / med, "identical_to_transformers_fp32_gpu": same_gpu,
           "identical_to_cpu_fp32": same_cpu, "timing": timings.get(name), "budget_log": budgets.get(name)}
    result["engines"][name] = row
    ratio = (statistics.median(times[base]) / med) if times.get(base) else float("nan")
    log(f"| {name} | {len(sents) / med:.1f} | {', '.join(f'{t:.3f}' for t in ts)} | {ratio:.2f} | {same_gpu} | {same_cpu} |")
(OUT / "probe.json").write_text(json.dumps(result, indent=1))
for name, bud in budgets.items():
    if bud:
        log(f"{name}: {bud[-1][-200:]}")
