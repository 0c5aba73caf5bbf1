"""PyTorch peer for the training benchmark: every encoder `paraforge train
--model NAME` trains, as the same model on the same Parquet pairs.

The averages (word, trigram, word,trigram; trainer/src/train.rs):
`EmbeddingBag` means, the cosine margin loss (delta 0.4) with the hardest
negative of another pair in the mega-batch, lazy (sparse) Adam. Trigrams as
core/src/encoder.rs: the sentence lowercased, tokenized, its tokens joined by
single spaces, padded with a space each side, every 3-character window;
trigrams seen twice or more in the whole data, the 100,000 most frequent.
The standalone trigram table is 300-d (paraforge's default without word
vectors), the word,trigram one as wide as the word vectors.

The neural encoders (trainer/src/neural.rs, nn_train.rs), all with dense
Adam, words cut at 100 tokens (trigrams at 600), unknown words as a zero
row, hidden size = word dimension, as `paraforge train --scramble 0`
(no scrambling here) with MAX negatives and lambda_c = lambda_w = 0:
  lstm, blstm, blstm-concat  nn.LSTM on packed sequences, mean of the hidden
                             states; blstm averages the directions' means,
                             blstm-concat concatenates them
  lstm-no-o                  nn.LSTM with the output gate held at 1: its
                             rows zero and its bias 1e4, so sigmoid = 1 and
                             its gradient 0 exactly (h = tanh(c))
  gran                       nn.LSTM's h_t, a_t = x_t * sigmoid(x_t W_x + b
                             + h_t W_h), mean of a_t
  rnn                        nn.RNN (tanh) on packed sequences, last state
  irnn                       identity-activation RNN, W_x = W_h = I, b = 0 at
                             the start, last state / length (a step loop:
                             nn.RNN has no identity activation)
  dan, proj                  the word average, then 1 tanh layer (dan) or
                             one linear map (proj), Glorot, zero bias
  gaussian                   word linear operators (Chen and Gimpel, 2020), KL prior of
                             every prefix state
  lstm-gaussian              lstm's mean state, then mean = h W_mu + b_mu,
                             variance = exp(h W_lv + b_lv), one KL term
  a+b+c / a,b,c              combinations: parts (word, trigram or a
                             non-Gaussian neural encoder, word-reading parts
                             sharing one word table) summed or concatenated
The cosine ones: margin 0.4 on cos = g / sqrt(|g|^2 + 1e-12); the Gaussians:
the expected-likelihood similarity, margin 1, hardest negative by it,
0.01 x the KL terms of all 4B sentences of a batch / B.

Prints one JSON line with pairs/s.
Usage: bench_train.py DATA_DIR VECTORS MODEL M THREADS [MAX_PAIRS]
Environment: TORCH_DEVICE (cpu; cuda or cuda:N trains on that GPU, every
tensor created there, the clock read after the device has finished).
"""

import glob
import gzip
import json
import os
import re
import sys
import time

import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from torch import nn

TOKEN = re.compile(r"[^\W_]+|[^\w\s]", re.UNICODE)
AVERAGES = ("word", "trigram", "word,trigram")
NEURAL = ("lstm", "lstm-no-o", "blstm", "blstm-concat", "gran", "rnn", "irnn", "dan", "proj", "gaussian", "lstm-gaussian")
GAUSSIANS = ("gaussian", "lstm-gaussian")
MAX_TOKENS = 100
DEVICE = os.environ.get("TORCH_DEVICE", "cpu")


def tokens(s):
    return TOKEN.findall(s.lower())


def trigrams(tk):
    """The trigrams of a tokenized sentence (core/src/encoder.rs)."""
    if not tk:
        return []
    w = " " + " ".join(tk) + " "
    return [w[i : i + 3] for i in range(len(w) - 2)]


B = 100


def megabatches(pairs, M, encode, usable):
    """The mega-batches of M x B encoded pairs, unusable pairs left out."""
    for lo in range(0, len(pairs), B * M):
        mb = [(encode(a), encode(b)) for a, b in pairs[lo : lo + B * M]]
        mb = [p for p in mb if usable(p[0]) and usable(p[1])]
        if len(mb) < 2:
            return
        yield mb


def hardest(x):
    """For each row of x (unit length; rows 2p, 2p+1 are pair p) the most
    similar row of another pair."""
    sim = x @ x.T
    own = torch.arange(len(x)) // 2
    sim[own[:, None] == own[None, :]] = -2
    return sim.argmax(1).tolist()


def likelihood(x, y):
    """log N(0; mu_x - mu_y, v_x + v_y) less its constant, for rows
    [mean, variance] (broadcasting over leading dimensions)."""
    k = x.shape[-1] // 2
    v = x[..., k:] + y[..., k:]
    return -0.5 * (v.log() + (x[..., :k] - y[..., :k]) ** 2 / v).sum(-1)


def most_likely(x):
    """As `hardest`, by the expected likelihood of two Gaussians."""
    own = torch.arange(len(x)) // 2
    sims = [likelihood(x[i : i + 128, None], x[None]) for i in range(0, len(x), 128)]
    sim = torch.cat(sims)
    sim[own[:, None] == own[None, :]] = -float("inf")
    return sim.argmax(1).tolist()


def margin(s, s2, n1, n2):
    cos = torch.nn.functional.cosine_similarity
    return (torch.relu(0.4 - cos(s, s2) + cos(s, n1)) + torch.relu(0.4 - cos(s2, s) + cos(s2, n2))).mean()


def cosine_margin(g, pairs, delta=0.4):
    """neural.rs margin_loss: g holds s, s', t(s), t(s') (pairs rows each)."""
    u = g / (g.square().sum(1, keepdim=True) + 1e-12).sqrt()
    s, s2, n1, n2 = u.split(pairs)
    pos = (s * s2).sum(1)
    return (torch.relu((s * n1).sum(1) - pos + delta) + torch.relu((s2 * n2).sum(1) - pos + delta)).sum() / pairs


def gaussian_margin(g, pairs, delta=1.0):
    s, s2, n1, n2 = g.split(pairs)
    pos = likelihood(s, s2)
    return (torch.relu(likelihood(s, n1) - pos + delta) + torch.relu(likelihood(s2, n2) - pos + delta)).sum() / pairs


def report(model, M, threads, done, t0, loss_sum):
    """The result line; mean_loss as paraforge's: the margin loss (no KL
    prior) summed over the pairs, divided by them."""
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()
    secs = time.time() - t0
    print(json.dumps({"peer": "pytorch", "model": model, "M": M, "threads": threads, "device": DEVICE,
                      "pairs": done, "seconds": secs, "pairs_per_second": done / secs,
                      "mean_loss": loss_sum / max(done, 1)}))


def main():
    data, vec_path, model, M, threads = sys.argv[1:6]
    max_pairs = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    M, threads = int(M), int(threads)
    torch.set_num_threads(threads)
    torch.set_default_device(DEVICE)
    torch.manual_seed(1)
    combine, parts = parse(model)
    all_pairs = []
    for f in sorted(glob.glob(f"{data}/**/*.parquet", recursive=True)):
        t = pq.read_table(f, columns=["reference", "translation"])
        all_pairs += list(zip(t.column("reference").to_pylist(), t.column("translation").to_pylist()))
    pairs = all_pairs[:max_pairs] if max_pairs else all_pairs
    opener = gzip.open if vec_path.endswith(".gz") else open
    words, rows = {}, []
    with opener(vec_path, "rt", encoding="utf-8") as fh:
        for line in fh:
            p = line.rstrip().split(" ")
            if p[0] not in words:
                words[p[0]] = len(rows)
                rows.append([float(x) for x in p[1:]])
    dim = len(rows[0])
    unk = len(rows)
    use_t = "trigram" in parts
    tri = {}
    if use_t:
        # As paraforge: counted over every pair of the data, --max-pairs or not.
        counts = {}
        for a, b in all_pairs:
            for s in (a, b):
                for g in trigrams(tokens(s)):
                    counts[g] = counts.get(g, 0) + 1
        for g, c in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:100000]:
            if c >= 2:
                tri[g] = len(tri)

    if model in AVERAGES:
        return average(model, pairs, words, rows, unk, dim, tri, M, threads)
    return neural(model, combine, parts, pairs, words, rows, unk, dim, tri, M, threads)


def parse(model):
    """(None, [encoder]) or ('+' | ',', parts) as neural.rs's Spec."""
    if model in AVERAGES:
        return None, model.split(",")
    if "+" in model or "," in model:
        sep = "+" if "+" in model else ","
        parts = model.split(sep)
        for p in parts:
            if p not in ("word", "trigram") + NEURAL or p in GAUSSIANS:
                sys.exit(f"bench_train.py: {p!r} cannot be a part of {model!r}")
        return sep, parts
    if model not in NEURAL:
        sys.exit(f"bench_train.py: unknown model {model!r}")
    return None, [model]


def average(model, pairs, words, rows, unk, dim, tri, M, threads):
    use_w, use_t = "word" in model, "trigram" in model
    # paraforge train's --trigram-dim default: the word vectors' size when
    # the model reads words, else 300.
    tdim = dim if use_w else 300

    def encode(s):
        tk = tokens(s)
        w = [words.get(t, unk) for t in tk] if use_w else []
        g = [tri[x] for x in trigrams(tk) if x in tri] if use_t else []
        return w, g

    W = torch.nn.EmbeddingBag(unk + 1, dim, mode="mean", sparse=True)
    with torch.no_grad():
        W.weight[:unk] = torch.tensor(rows)
        W.weight[unk] = 0
    T = torch.nn.EmbeddingBag(max(len(tri), 1), tdim, mode="mean", sparse=True)
    torch.nn.init.uniform_(T.weight, -0.05, 0.05)
    params = ([W.weight] if use_w else []) + ([T.weight] if use_t else [])
    opt = torch.optim.SparseAdam(params, lr=0.001)

    def embed(enc):
        parts = []
        for use, table, k in ((use_w, W, 0), (use_t, T, 1)):
            if not use:
                continue
            flat, offs = [], []
            for e in enc:
                offs.append(len(flat))
                flat += e[k]
            parts.append(table(torch.tensor(flat, dtype=torch.long), torch.tensor(offs, dtype=torch.long)))
        if len(parts) > 1:
            # As paraforge's WORD,TRIGRAM: each half at unit length, then
            # at sqrt(d_i / D) (weighted by dimension).
            total = sum(p.shape[1] for p in parts)
            parts = [p / (p.pow(2).sum(1, keepdim=True) + 1e-24).sqrt() * (p.shape[1] / total) ** 0.5 for p in parts]
        return torch.cat(parts, 1)

    t0 = time.time()
    done, loss_sum = 0, 0.0
    for mb in megabatches(pairs, M, encode, lambda e: e[0] or e[1]):
        sents = [s for p in mb for s in p]
        with torch.no_grad():
            neg = hardest(torch.nn.functional.normalize(embed(sents), dim=1))
        for i in range(0, len(mb), B):
            idx = list(range(i, min(i + B, len(mb))))
            s = embed([mb[j][0] for j in idx])
            s2 = embed([mb[j][1] for j in idx])
            n1 = embed([sents[neg[2 * j]] for j in idx])
            n2 = embed([sents[neg[2 * j + 1]] for j in idx])
            loss = margin(s, s2, n1, n2)
            loss_sum += loss.item() * len(idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
        done += len(mb)
    report(model, M, threads, done, t0, loss_sum)


class Batch:
    """Sentences (word ids, trigram ids) as tensors: right-padded word ids
    [n, L] (padding id 0, as neural.rs), lengths, their mask, and the flat
    ids and offsets of both for `embedding_bag`."""

    def __init__(self, enc, use_t):
        lens = [len(w) for w, _ in enc]
        self.n = len(enc)
        self.lens = torch.tensor(lens)
        self.flat = torch.tensor([i for w, _ in enc for i in w], dtype=torch.long)
        self.offs = torch.tensor([0] + lens[:-1]).cumsum(0)
        L = max(lens)
        self.mask = torch.arange(L)[None, :] < self.lens[:, None]
        self.ids = torch.zeros(self.n, L, dtype=torch.long)
        self.ids[self.mask] = self.flat
        if use_t:
            tl = [len(t) for _, t in enc]
            self.tflat = torch.tensor([i for _, t in enc for i in t], dtype=torch.long)
            self.toffs = torch.tensor([0] + tl[:-1]).cumsum(0)


def glorot(lin):
    a = (6.0 / (lin.in_features + lin.out_features)) ** 0.5
    nn.init.uniform_(lin.weight, -a, a)
    nn.init.zeros_(lin.bias)


class Part(nn.Module):
    """One encoder of neural.rs (or a combination's part) over the shared
    word table; forward gives (embedding, KL term or None)."""

    def __init__(self, arch, dim, hidden, unk, layers=1):
        super().__init__()
        self.arch, self.hidden = arch, hidden
        if arch in ("lstm", "lstm-no-o", "blstm", "blstm-concat", "gran", "lstm-gaussian"):
            # Uniform in +-1/sqrt(hidden), as neural.rs; PyTorch's LSTM has
            # two bias vectors (b_ih + b_hh) where paraforge has one.
            self.rnn = nn.LSTM(dim, hidden, batch_first=True, bidirectional=arch.startswith("blstm"))
        if arch == "lstm-no-o":
            # Gates are i, f, g, o in PyTorch: the o rows.
            with torch.no_grad():
                o = slice(3 * hidden, 4 * hidden)
                self.rnn.weight_ih_l0[o] = 0
                self.rnn.weight_hh_l0[o] = 0
                self.rnn.bias_ih_l0[o] = 1e4
                self.rnn.bias_hh_l0[o] = 0
        if arch == "gran":
            a = dim**-0.5
            self.gx = nn.Linear(dim, dim)
            self.gh = nn.Linear(hidden, dim, bias=False)
            for p in (self.gx.weight, self.gx.bias, self.gh.weight):
                nn.init.uniform_(p, -a, a)
        if arch == "rnn":
            self.rnn = nn.RNN(dim, hidden, batch_first=True)
        if arch == "irnn":
            self.wx = nn.Parameter(torch.eye(dim, hidden))
            self.wh = nn.Parameter(torch.eye(hidden))
            self.b = nn.Parameter(torch.zeros(hidden))
        if arch in ("dan", "proj"):
            n = layers if arch == "dan" else 1
            self.dense = nn.ModuleList(nn.Linear(dim if k == 0 else hidden, hidden) for k in range(n))
            for lin in self.dense:
                glorot(lin)
        if arch == "lstm-gaussian":
            self.mu, self.lv = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
            glorot(self.mu)
            glorot(self.lv)
        if arch == "gaussian":
            self.scale = nn.Embedding(unk + 1, dim)
            nn.init.uniform_(self.scale.weight, 0.95, 1.05)

    def states(self, x, b):
        """Every step's output of the recurrent cell, zero at padding."""
        # Packing wants the lengths on the host, wherever the data is.
        pack = nn.utils.rnn.pack_padded_sequence(x, b.lens.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(pack)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]

    def forward(self, net, b, x):
        a, lens = self.arch, b.lens[:, None]
        if a == "word":
            return F.embedding_bag(b.flat, net.emb.weight, b.offs, mode="mean"), None
        if a == "trigram":
            return F.embedding_bag(b.tflat, net.tri.weight, b.toffs, mode="mean"), None
        if a in ("lstm", "lstm-no-o", "lstm-gaussian"):
            h = self.states(x, b).sum(1) / lens
            if a != "lstm-gaussian":
                return h, None
            mu, lv = self.mu(h), self.lv(h)
            kl = 0.5 * (lv.exp() + mu * mu - lv - 1).sum(1)
            return torch.cat([mu, lv.exp()], 1), kl
        if a in ("blstm", "blstm-concat"):
            out = self.states(x, b).sum(1) / lens
            fw, bw = out[:, : self.hidden], out[:, self.hidden :]
            return ((fw + bw) / 2 if a == "blstm" else out), None
        if a == "gran":
            h = self.states(x, b)
            gate = torch.sigmoid(self.gx(x) + self.gh(h))
            return (x * gate * b.mask[:, :, None]).sum(1) / lens, None
        if a == "rnn":
            pack = nn.utils.rnn.pack_padded_sequence(x, b.lens.cpu(), batch_first=True, enforce_sorted=False)
            return self.rnn(pack)[1][0], None
        if a == "irnn":
            xw = x @ self.wx + self.b
            h = torch.zeros(b.n, self.hidden)
            for t in range(x.shape[1]):
                h = torch.where(b.mask[:, t : t + 1], xw[:, t] + h @ self.wh, h)
            return h / lens, None
        if a in ("dan", "proj"):
            g = F.embedding_bag(b.flat, net.emb.weight, b.offs, mode="mean")
            for lin in self.dense:
                g = torch.tanh(lin(g)) if a == "dan" else lin(g)
            return g, None
        if a == "gaussian":
            # z_t = A_t (z_{t-1} + B_t) from N(0, I); padding is the
            # identity operator and adds no KL.
            A, Bt = self.scale(b.ids), x
            mu = torch.zeros(b.n, x.shape[2])
            lv = torch.zeros_like(mu)
            kl = torch.zeros(b.n)
            for t in range(x.shape[1]):
                m = b.mask[:, t : t + 1].to(x.dtype)
                at = A[:, t] * m + 1 - m
                mu = at * (mu + Bt[:, t] * m)
                lv = lv + torch.log(at * at)
                kl = kl + 0.5 * (lv.exp() + mu * mu - 1 - lv).sum(1) * m[:, 0]
            return torch.cat([mu, lv.exp()], 1), kl
        raise ValueError(a)


class Net(nn.Module):
    """The word table (GloVe rows, unknown word a zero row last), a trigram
    table for a combination with a trigram part (uniform +-0.05, as wide as
    the words), and the parts, each at unit length, summed ('+') or
    concatenated (','; each part then at sqrt(d_i / D), weighted by
    dimension)."""

    def __init__(self, combine, parts, rows, unk, dim, ntri):
        super().__init__()
        self.combine = combine
        self.emb = nn.Embedding(unk + 1, dim)
        with torch.no_grad():
            self.emb.weight[:unk] = torch.tensor(rows)
            self.emb.weight[unk] = 0
        self.tri = None
        if "trigram" in parts:
            self.tri = nn.Embedding(max(ntri, 1), dim)
            nn.init.uniform_(self.tri.weight, -0.05, 0.05)
        self.parts = nn.ModuleList(Part(p, dim, dim, unk) for p in parts)
        self.reads_x = any(p not in ("word", "trigram", "dan", "proj") for p in parts)

    def forward(self, b):
        x = self.emb(b.ids) if self.reads_x else None
        outs = [p(self, b, x) for p in self.parts]
        if self.combine is None:
            return outs[0]
        # Each part at unit length, as paraforge's combinations; a
        # concatenation's then at sqrt(d_i / D).
        gs = [g / (g.pow(2).sum(1, keepdim=True) + 1e-24).sqrt() for g, _ in outs]
        if self.combine == ",":
            total = sum(g.shape[1] for g in gs)
            gs = [g * (g.shape[1] / total) ** 0.5 for g in gs]
        return (sum(gs[1:], gs[0]) if self.combine == "+" else torch.cat(gs, 1)), None


def neural(model, combine, parts, pairs, words, rows, unk, dim, tri, M, threads):
    use_t = "trigram" in parts
    gauss = parts[0] in GAUSSIANS
    net = Net(combine, parts, rows, unk, dim, len(tri))
    opt = torch.optim.Adam(net.parameters(), lr=0.001)

    def encode(s):
        tk = tokens(s)
        w = [words.get(t, unk) for t in tk][:MAX_TOKENS]
        g = [tri[x] for x in trigrams(tk) if x in tri][: 6 * MAX_TOKENS] if use_t else []
        return w, g

    t0 = time.time()
    done, loss_sum = 0, 0.0
    for mb in megabatches(pairs, M, encode, lambda e: bool(e[0])):
        sents = [s for p in mb for s in p]
        # The negatives: every sentence embedded with the parameters at the
        # mega-batch's start, in length-sorted chunks of 256 (as paraforge).
        order = sorted(range(len(sents)), key=lambda i: len(sents[i][0]))
        with torch.no_grad():
            x = torch.cat([net(Batch([sents[i] for i in order[k : k + 256]], use_t))[0] for k in range(0, len(order), 256)])
            x = x[torch.tensor(order).argsort()]
            neg = most_likely(x) if gauss else hardest(torch.nn.functional.normalize(x, dim=1))
        for i in range(0, len(mb), B):
            idx = list(range(i, min(i + B, len(mb))))
            batch = Batch([mb[j][0] for j in idx] + [mb[j][1] for j in idx]
                          + [sents[neg[2 * j]] for j in idx] + [sents[neg[2 * j + 1]] for j in idx], use_t)
            g, kl = net(batch)
            loss = gaussian_margin(g, len(idx)) if gauss else cosine_margin(g, len(idx))
            loss_sum += loss.item() * len(idx)
            if gauss:
                loss = loss + 0.01 * kl.sum() / len(idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
        done += len(mb)
    report(model, M, threads, done, t0, loss_sum)


if __name__ == "__main__":
    main()
