"""PyTorch peer for the training benchmark: the same WORD / WORD,TRIGRAM
models, margin loss, mega-batch negatives and lazy (sparse) Adam as
`paraforge train`, on the same Parquet pairs; LSTM / BLSTM (hidden = word
dimension, mean of the hidden states, BLSTM's directions averaged, packed
sequences so that the backward pass starts at the last token, dense Adam)
as `paraforge train --model lstm|blstm --scramble 0`; the word-operator
Gaussian (seed 004: per-word scale and translation, expected-likelihood
margin loss with delta 1, hardest negative by that similarity, KL prior of
every prefix state with weight 0.01, dense Adam) as `paraforge train --model
gaussian --scramble 0`. Prints one JSON line with
pairs/s. Usage: bench_train.py DATA_DIR VECTORS MODEL M THREADS [MAX_PAIRS]
"""

import glob
import gzip
import json
import re
import sys
import time

import pyarrow.parquet as pq
import torch

TOKEN = re.compile(r"[^\W_]+|[^\w\s]", re.UNICODE)


def tokens(s):
    return TOKEN.findall(s.lower())


def trigrams(tok):
    w = " " + tok + " "
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
    return sim.argmax(1)


def margin(s, s2, n1, n2):
    cos = torch.nn.functional.cosine_similarity
    return (torch.relu(0.4 - cos(s, s2) + cos(s, n1)) + torch.relu(0.4 - cos(s2, s) + cos(s2, n2))).mean()


def main():
    data, vec_path, model, M, threads = sys.argv[1:6]
    max_pairs = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    M, threads = int(M), int(threads)
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    pairs = []
    for f in sorted(glob.glob(f"{data}/**/*.parquet", recursive=True)):
        t = pq.read_table(f, columns=["reference", "translation"])
        pairs += list(zip(t.column("reference").to_pylist(), t.column("translation").to_pylist()))
    if max_pairs:
        pairs = pairs[:max_pairs]
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
    use_w, use_t = "word" in model, "trigram" in model
    tri = {}
    if use_t:
        counts = {}
        for a, b in pairs:
            for s in (a, b):
                for tk in tokens(s):
                    for g in trigrams(tk):
                        counts[g] = counts.get(g, 0) + 1
        for g, c in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:100000]:
            if c >= 2:
                tri[g] = len(tri)

    def encode(s):
        tk = tokens(s)
        w = [words.get(t, unk) for t in tk]
        g = [tri[x] for t in tk for x in trigrams(t) if x in tri]
        return w, g

    if model in ("lstm", "blstm"):
        return recurrent(model, pairs, words, rows, unk, dim, M, threads)
    if model == "gaussian":
        return gaussian(pairs, words, rows, unk, dim, M, threads)

    W = torch.nn.EmbeddingBag(unk + 1, dim, mode="mean", sparse=True)
    with torch.no_grad():
        W.weight[:unk] = torch.tensor(rows)
        W.weight[unk] = 0
    T = torch.nn.EmbeddingBag(max(len(tri), 1), dim, mode="mean", sparse=True)
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
        return torch.cat(parts, 1)

    t0 = time.time()
    done = 0
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
            opt.zero_grad()
            loss.backward()
            opt.step()
        done += len(mb)
    secs = time.time() - t0
    print(json.dumps({"peer": "pytorch", "model": model, "M": M, "threads": threads, "pairs": done, "seconds": secs, "pairs_per_second": done / secs}))


def recurrent(model, pairs, words, rows, unk, dim, M, threads):
    emb = torch.nn.Embedding(unk + 1, dim)
    with torch.no_grad():
        emb.weight[:unk] = torch.tensor(rows)
        emb.weight[unk] = 0
    bi = model == "blstm"
    lstm = torch.nn.LSTM(dim, dim, batch_first=True, bidirectional=bi)
    opt = torch.optim.Adam(list(emb.parameters()) + list(lstm.parameters()), lr=0.001)
    pack = torch.nn.utils.rnn.pack_padded_sequence
    unpack = torch.nn.utils.rnn.pad_packed_sequence

    def encode(s):
        return [words.get(t, unk) for t in tokens(s)][:100]

    def embed(enc):
        lens = torch.tensor([len(e) for e in enc])
        ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(e) for e in enc], batch_first=True)
        out, _ = lstm(pack(emb(ids), lens, batch_first=True, enforce_sorted=False))
        out, _ = unpack(out, batch_first=True)
        if bi:
            out = (out[:, :, :dim] + out[:, :, dim:]) / 2
        return out.sum(1) / lens[:, None]

    t0 = time.time()
    done = 0
    for mb in megabatches(pairs, M, encode, bool):
        sents = [s for p in mb for s in p]
        with torch.no_grad():
            neg = hardest(torch.cat([torch.nn.functional.normalize(embed(sents[k : k + 256]), dim=1) for k in range(0, len(sents), 256)]))
        for i in range(0, len(mb), B):
            idx = list(range(i, min(i + B, len(mb))))
            g = embed([mb[j][0] for j in idx] + [mb[j][1] for j in idx]
                      + [sents[neg[2 * j]] for j in idx] + [sents[neg[2 * j + 1]] for j in idx])
            loss = margin(*g.split(len(idx)))
            opt.zero_grad()
            loss.backward()
            opt.step()
        done += len(mb)
    secs = time.time() - t0
    print(json.dumps({"peer": "pytorch", "model": model, "M": M, "threads": threads, "pairs": done, "seconds": secs, "pairs_per_second": done / secs}))


def gaussian(pairs, words, rows, unk, dim, M, threads):
    shift = torch.nn.Embedding(unk + 1, dim)
    scale = torch.nn.Embedding(unk + 1, dim)
    with torch.no_grad():
        shift.weight[:unk] = torch.tensor(rows)
        shift.weight[unk] = 0
        scale.weight.uniform_(0.95, 1.05)
    opt = torch.optim.Adam(list(shift.parameters()) + list(scale.parameters()), lr=0.001)

    def encode(s):
        return [words.get(t, unk) for t in tokens(s)][:100]

    def embed(enc):
        """[mean, variance] of each sentence and its summed KL terms."""
        ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(e) for e in enc], batch_first=True)
        mask = (torch.arange(ids.shape[1])[None, :] < torch.tensor([len(e) for e in enc])[:, None])
        A, B = scale(ids), shift(ids)
        mu = torch.zeros(len(enc), dim)
        lv = torch.zeros_like(mu)
        kl = torch.zeros(len(enc))
        for t in range(ids.shape[1]):
            m = mask[:, t : t + 1]
            a = A[:, t] * m + 1 - m
            mu = a * (mu + B[:, t] * m)
            lv = lv + torch.log(a * a)
            kl = kl + 0.5 * (lv.exp() + mu * mu - 1 - lv).sum(1) * m[:, 0]
        return torch.cat([mu, lv.exp()], 1), kl

    def d(x, y):
        v = x[:, dim:] + y[:, dim:]
        return -0.5 * (v.log() + (x[:, :dim] - y[:, :dim]) ** 2 / v).sum(-1)

    def most_likely(x):
        own = torch.arange(len(x)) // 2
        sim = torch.stack([d(x[i : i + 1], x) for i in range(len(x))])
        sim[own[:, None] == own[None, :]] = -float("inf")
        return sim.argmax(1)

    t0 = time.time()
    done = 0
    for mb in megabatches(pairs, M, encode, bool):
        sents = [s for p in mb for s in p]
        with torch.no_grad():
            neg = most_likely(torch.cat([embed(sents[k : k + 256])[0] for k in range(0, len(sents), 256)]))
        for i in range(0, len(mb), B):
            idx = list(range(i, min(i + B, len(mb))))
            g, kl = embed([mb[j][0] for j in idx] + [mb[j][1] for j in idx]
                          + [sents[neg[2 * j]] for j in idx] + [sents[neg[2 * j + 1]] for j in idx])
            s, s2, n1, n2 = g.split(len(idx))
            pos = d(s, s2)
            loss = (torch.relu(1.0 - pos + d(s, n1)) + torch.relu(1.0 - pos + d(s2, n2))).mean() + 0.01 * kl.sum() / len(idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
        done += len(mb)
    secs = time.time() - t0
    print(json.dumps({"peer": "pytorch", "model": "gaussian", "M": M, "threads": threads, "pairs": done, "seconds": secs, "pairs_per_second": done / secs}))


if __name__ == "__main__":
    main()
