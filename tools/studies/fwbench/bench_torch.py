"""PyTorch peer of bench_candle / bench_burn (tools/studies/fwbench): the same data,
vocabulary, batches, model and loss; nn.LSTM (its fused CPU kernels).

Usage: bench_torch.py DATA MODEL STEPS WARMUP BATCH DIM THREADS
Prints one JSON line (pairs/s over STEPS timed steps after WARMUP steps).
"""

import json
import sys
import time
from collections import Counter

import torch
from torch import nn

MAX_TOKENS, VOCAB, PAD, UNK, DELTA, LR = 30, 20000, 0, 1, 0.4, 0.001


def tokens(s):
    return [w.lower() for w in s.split()[:MAX_TOKENS]]


def load(path):
    # Same as fwbench::load: lines split on tabs, str.split() = split_whitespace.
    raw = []
    with open(path, encoding="utf-8") as fh:
        for line in fh.read().splitlines():
            p = line.split("\t")
            if len(p) >= 2:
                raw.append((tokens(p[0]), tokens(p[1])))
    counts = Counter(w for a, b in raw for w in a + b)
    words = sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:VOCAB]
    ids = {w: i + 2 for i, (w, _) in enumerate(words)}
    enc = lambda s: [ids.get(w, UNK) for w in s] or [UNK]
    return [(enc(a), enc(b)) for a, b in raw], len(words) + 2


def batch(pairs, step, b):
    sents = []
    for i in range(b):
        p = pairs[(step * b + i) % len(pairs)]
        sents += [p[0], p[1]]
    n, L = len(sents), max(len(s) for s in sents)
    ids = torch.zeros(n, L, dtype=torch.long)
    mask = torch.zeros(n, L)
    for r, s in enumerate(sents):
        ids[r, : len(s)] = torch.tensor(s)
        mask[r, : len(s)] = 1.0
    lens = mask.sum(1, keepdim=True)
    pair = torch.arange(n) // 2
    same = (pair[:, None] == pair[None, :]).float() * -4.0
    partner = torch.arange(n) ^ 1
    return ids, mask, lens, same, partner


class Model(nn.Module):
    def __init__(self, rows, dim, blstm):
        super().__init__()
        self.emb = nn.Embedding(rows, dim)
        nn.init.uniform_(self.emb.weight, -0.05, 0.05)
        # Padded batches, no packing (as the Rust peers: the backward
        # direction also reads the padding; pooling masks it).
        self.lstm = nn.LSTM(dim, dim, batch_first=True, bidirectional=blstm)
        self.blstm, self.dim = blstm, dim

    def forward(self, ids, mask, lens):
        h, _ = self.lstm(self.emb(ids))
        if self.blstm:
            h = (h[..., : self.dim] + h[..., self.dim :]) * 0.5
        return (h * mask.unsqueeze(2)).sum(1) / lens


def margin_loss(g, same, partner):
    norm = g / (g.pow(2).sum(1, keepdim=True) + 1e-8).sqrt()
    pos = (norm * norm[partner]).sum(1)
    neg = (norm @ norm.t() + same).max(1).values
    return torch.relu(DELTA - pos + neg).sum() / (g.shape[0] // 2)


def main():
    data, model, steps, warmup, b, dim, threads = sys.argv[1:8]
    steps, warmup, b, dim, threads = map(int, (steps, warmup, b, dim, threads))
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    pairs, rows = load(data)
    m = Model(rows, dim, model == "blstm")
    opt = torch.optim.Adam(m.parameters(), lr=LR)

    def step(k):
        ids, mask, lens, same, partner = batch(pairs, k, b)
        loss = margin_loss(m(ids, mask, lens), same, partner)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    first = None
    for k in range(warmup):
        v = step(k)
        first = v if first is None else first
    t0 = time.perf_counter()
    last, window = None, []
    for k in range(warmup, warmup + steps):
        last = step(k)
        first = last if first is None else first
        window.append(last)
        if steps >= 100 and (k + 1) % 20 == 0:
            print(f"pytorch {model} step {k + 1:>4} mean loss of last {len(window)} steps {sum(window) / len(window):.4f}", file=sys.stderr)
            window = []
    secs = time.perf_counter() - t0
    print(json.dumps({
        "peer": "pytorch", "impl": "nn.LSTM", "model": model, "threads": threads, "batch": b, "dim": dim,
        "steps": steps, "seconds": round(secs, 3), "pairs_per_second": round(steps * b / secs, 1),
        "loss_first": round(first, 4), "loss_last": round(last, 4), "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
