#!/usr/bin/python3
"""A plain Python ROUGE (rouge_score 0.1.2's algorithm) as a test oracle for llmbench.

rouge_score itself is not packaged for Debian; this file restates its documented
algorithm in the most direct way (full DP tables, Counters) on top of NLTK's own
PorterStemmer, which is the part that is hard to get right. Used to write
tests/fixtures/rouge/oracle.jsonl, which tests/test_rouge.c checks llmbench against:

  tools/rouge_oracle.py fixture --seed 1 --pairs 300 --out tests/fixtures/rouge/oracle.jsonl
  tools/rouge_oracle.py score --pred "text" --ref "text"

Each fixture record holds "prediction", "reference" and the oracle's [P, R, F] per ROUGE
type, so the file also works as both --pred and --ref of `llmbench rouge`.

Algorithm (rouge_score, use_stemmer=True, texts as given: no sentence splitting):
  tokens: lower(); runs outside [a-z0-9] become one space; split; stem tokens longer than
          3 characters; drop empty tokens.
  rougeN: clipped n-gram overlap; P = overlap / max(#pred n-grams, 1), R likewise.
  rougeL: LCS length of the token lists; P = LCS / #pred, R = LCS / #ref; 0 if one is empty.
  rougeLsum: sentences are the non-empty "\n"-separated lines; for each reference line the
          union of the positions of one LCS with every prediction line (the LCS read back
          from the bottom-right cell: diagonal on a match, else left if the left cell is
          larger than the upper one, else up); a union token is a hit while both texts still
          have unused occurrences of it. P = hits / #pred tokens, R = hits / #ref tokens.
  F = 2PR / (P + R), 0 when P + R = 0.
"""
import argparse
import collections
import json
import os
import random
import re
import sys

from nltk.stem.porter import PorterStemmer

STEMMER = PorterStemmer()
TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def tokens(text, stem=True):
    words = re.sub(r"[^a-z0-9]+", " ", text.lower()).split(" ")
    out = []
    for w in words:
        if stem and len(w) > 3:
            w = STEMMER.stem(w)
        if re.fullmatch(r"[a-z0-9]+", w):
            out.append(w)
    return out


def fmeasure(p, r):
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def ngram_score(ref, pred, n):
    rc = collections.Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
    pc = collections.Counter(tuple(pred[i:i + n]) for i in range(len(pred) - n + 1))
    overlap = sum(min(c, pc[g]) for g, c in rc.items())
    p = overlap / max(sum(pc.values()), 1)
    r = overlap / max(sum(rc.values()), 1)
    return p, r, fmeasure(p, r)


def lcs_table(a, b):
    t = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            t[i][j] = t[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1] else max(t[i - 1][j], t[i][j - 1])
    return t


def lcs_positions(a, b):
    t = lcs_table(a, b)
    i, j, pos = len(a), len(b), []
    while i > 0 and j > 0:
        if a[i - 1] == b[j - 1]:
            pos.append(i - 1)
            i, j = i - 1, j - 1
        elif t[i][j - 1] > t[i - 1][j]:
            j -= 1
        else:
            i -= 1
    return pos


def lcs_score(ref, pred):
    if not ref or not pred:
        return 0.0, 0.0, 0.0
    lcs = lcs_table(ref, pred)[-1][-1]
    p, r = lcs / len(pred), lcs / len(ref)
    return p, r, fmeasure(p, r)


def lsum_score(ref_text, pred_text, stem=True):
    ref = [tokens(s, stem) for s in ref_text.split("\n") if s]
    pred = [tokens(s, stem) for s in pred_text.split("\n") if s]
    m, n = sum(map(len, ref)), sum(map(len, pred))
    if not ref or not pred or not m or not n:
        return 0.0, 0.0, 0.0
    left_ref = collections.Counter(t for s in ref for t in s)
    left_pred = collections.Counter(t for s in pred for t in s)
    hits = 0
    for r in ref:
        union = set()
        for c in pred:
            union.update(lcs_positions(r, c))
        for i in sorted(union):
            t = r[i]
            if left_ref[t] > 0 and left_pred[t] > 0:
                hits += 1
                left_ref[t] -= 1
                left_pred[t] -= 1
    p, r = hits / n, hits / m
    return p, r, fmeasure(p, r)


def score(ref_text, pred_text, stem=True):
    ref, pred = tokens(ref_text, stem), tokens(pred_text, stem)
    return {
        "rouge1": ngram_score(ref, pred, 1),
        "rouge2": ngram_score(ref, pred, 2),
        "rougeL": lcs_score(ref, pred),
        "rougeLsum": lsum_score(ref_text, pred_text, stem),
    }


# ---- random corpus ----------------------------------------------------------------------

ODD = ["\u0130stanbul", "\u212Aelvin", "caf\u00e9", "stra\u00dfe", "na\u00efve", "\u2014",
       "\u2019s", "\U0001F642", "\u00a0", "\t", "\r", "K.", "U.S.", "(AP)", "1,000", "3.5%",
       "e-mail", "x86_64", "\u00c9COLE", "\u201cquoted\u201d", "..."]


def vocabulary(stem_fixture):
    """Word families that stem alike (e.g. connect, connected, connecting) and common
    short words, from the stem fixture."""
    families = collections.defaultdict(list)
    with open(stem_fixture) as f:
        for line in f:
            if line.startswith("#"):
                continue
            word, stem = line.rstrip("\n").split("\t")
            if word.isalpha() and 3 <= len(word) <= 12:
                families[stem].append(word)
    rich = sorted(s for s, ws in families.items() if len(ws) >= 3)
    return families, rich


def make_sentence(rng, families, stems):
    words = []
    for _ in range(rng.randint(0, 25)):
        roll = rng.random()
        if roll < 0.25:
            words.append(rng.choice(["the", "a", "of", "to", "in", "and", "is", "was", "he",
                                     "she", "it", "on", "for", "by", "at"]))
        elif roll < 0.9:
            words.append(rng.choice(families[rng.choice(stems)]))
        elif roll < 0.95:
            words.append(str(rng.randint(0, 2025)))
        else:
            words.append(rng.choice(ODD))
    out = []
    for w in words:
        roll = rng.random()
        if roll < 0.1:
            w = w.capitalize()
        elif roll < 0.13:
            w = w.upper()
        if rng.random() < 0.08:
            w += rng.choice([",", ";", ":", "'s", "-", "/"])
        out.append(w)
    sentence = " ".join(out)
    if sentence and rng.random() < 0.8:
        sentence += rng.choice([".", ".", "!", "?", " ."])
    return sentence


def perturb(rng, sentences, families):
    """A prediction made from the reference: sentences dropped, shuffled, words swapped
    for other members of their family, deleted or added."""
    out = []
    for s in sentences:
        if rng.random() < 0.15:
            continue
        words = s.split(" ")
        new = []
        for w in words:
            roll = rng.random()
            if roll < 0.1:
                continue
            if roll < 0.25:
                fam = families.get(STEMMER.stem(w.lower()))
                if fam:
                    w = rng.choice(fam)
            new.append(w)
            if rng.random() < 0.05:
                new.append(rng.choice(words))
        out.append(" ".join(new))
    if len(out) > 1 and rng.random() < 0.3:
        rng.shuffle(out)
    return out


def make_fixture(args):
    rng = random.Random(args.seed)
    families, stems = vocabulary(args.stem_fixture)
    with open(args.out, "w") as f:
        for k in range(args.pairs):
            ref_sents = [make_sentence(rng, families, stems) for _ in range(rng.randint(1, 6))]
            if k % 10 == 9:  # unrelated texts now and then
                pred_sents = [make_sentence(rng, families, stems) for _ in range(rng.randint(0, 5))]
            else:
                pred_sents = perturb(rng, ref_sents, families)
            sep = lambda: rng.choice(["\n", "\n", "\n", " ", "\n\n", " \n"])
            ref = "".join(s + sep() for s in ref_sents).rstrip(" ")
            pred = "".join(s + sep() for s in pred_sents).rstrip(" ")
            rec = {"prediction": pred, "reference": ref}
            rec.update({t: list(v) for t, v in score(ref, pred).items()})
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print("%s: %d pairs" % (args.out, args.pairs))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    fixtures = os.path.join(here, "..", "tests", "fixtures", "rouge")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    fx = sub.add_parser("fixture", help="write a random corpus with oracle scores (JSONL)")
    fx.add_argument("--seed", type=int, default=1)
    fx.add_argument("--pairs", type=int, default=300)
    fx.add_argument("--stem-fixture", default=os.path.join(fixtures, "stem_nltk.tsv"))
    fx.add_argument("--out", default=os.path.join(fixtures, "oracle.jsonl"))
    sc = sub.add_parser("score", help="score one pair")
    sc.add_argument("--pred", required=True)
    sc.add_argument("--ref", required=True)
    args = ap.parse_args()
    if args.cmd == "fixture":
        make_fixture(args)
    else:
        json.dump(score(args.ref, args.pred), sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
