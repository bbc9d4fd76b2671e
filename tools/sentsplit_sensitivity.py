#!/usr/bin/python3
"""How much ROUGE-Lsum depends on the sentence splitter (llmbench's rules vs Punkt).

MLPerf splits sentences with NLTK's pre-trained English Punkt model, which Debian does not
ship. Punkt is unsupervised, so this script trains a Punkt model on English prose found on
this machine (/usr/share/doc), builds reference/prediction pairs from paragraphs of that
prose (the prediction drops, swaps and reorders words and sentences), and prints the mean
ROUGE-Lsum of `llmbench rouge` with four splits of the same texts:
  punkt    "\\n".join(sent_tokenize(text.strip())) with the trained model (MLPerf's recipe)
  llmbench llmbench's rule-based splitter (the default of `llmbench rouge`)
  naive    a break after every [.?!] run followed by whitespace
  none     no split: ROUGE-Lsum of one sentence, equal to ROUGE-L
rouge1/2/L do not depend on the split; they are printed as a check.

Usage: tools/sentsplit_sensitivity.py --llmbench build/llmbench [--texts 3000]
"""
import argparse
import gzip
import json
import os
import random
import re
import subprocess
import tempfile

from nltk.tokenize.punkt import PunktSentenceTokenizer, PunktTrainer


def paragraphs(doc_dir):
    out = []
    for root, _, files in os.walk(doc_dir):
        for name in files:
            base = name[:-3] if name.endswith(".gz") else name
            if not (base.upper().startswith(("README", "NEWS")) or base.endswith(".txt")
                    or base == "copyright"):
                continue
            path = os.path.join(root, name)
            try:
                opener = gzip.open if name.endswith(".gz") else open
                with opener(path, "rt", errors="replace") as f:
                    text = f.read(400_000)
            except (OSError, EOFError):
                continue
            for block in re.split(r"\n\s*\n", text):
                para = " ".join(line.strip() for line in block.splitlines())
                letters = sum(c.isalpha() or c == " " for c in para)
                if 200 <= len(para) <= 1500 and letters >= 0.85 * len(para) and \
                        len(re.findall(r"[.?!] [A-Z]", para)) >= 1:
                    out.append(para)
    return sorted(set(out))


def perturb(rng, sentences):
    out = []
    for s in sentences:
        if rng.random() < 0.2:
            continue
        words = [w for w in s.split(" ") if rng.random() > 0.15]
        for _ in range(len(words) // 8):
            i, j = rng.randrange(len(words)), rng.randrange(len(words))
            words[i], words[j] = words[j], words[i]
        out.append(" ".join(words))
    if len(out) > 1 and rng.random() < 0.3:
        rng.shuffle(out)
    return " ".join(out) if out else sentences[0]


def naive(text):
    return re.sub(r"([.?!]+[\"')\]]*)\s+", "\\1\n", text.strip())


def rouge(llmbench, pred, ref, tmp, extra):
    paths = []
    for name, texts in (("pred", pred), ("ref", ref)):
        path = os.path.join(tmp, name + ".jsonl")
        with open(path, "w") as f:
            for t in texts:
                f.write(json.dumps(t) + "\n")
        paths.append(path)
    cmd = [llmbench, "rouge", "--pred", paths[0], "--ref", paths[1], "--json"] + extra
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llmbench", required=True)
    ap.add_argument("--docs", default="/usr/share/doc")
    ap.add_argument("--texts", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    paras = paragraphs(args.docs)
    trainer = PunktTrainer()
    trainer.INCLUDE_ALL_COLLOCS = True
    trainer.train("\n\n".join(paras), finalize=True)
    punkt = PunktSentenceTokenizer(trainer.get_params())

    rng = random.Random(args.seed)
    chosen = rng.sample(paras, min(args.texts, len(paras)))
    refs = chosen
    preds = [perturb(rng, punkt.tokenize(p)) for p in chosen]
    split_punkt = lambda t: "\n".join(punkt.tokenize(t.strip()))
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "punkt": rouge(args.llmbench, [split_punkt(t) for t in preds],
                           [split_punkt(t) for t in refs], tmp, ["--no-split"]),
            "llmbench": rouge(args.llmbench, preds, refs, tmp, []),
            "naive": rouge(args.llmbench, [naive(t) for t in preds], [naive(t) for t in refs],
                           tmp, ["--no-split"]),
            "none": rouge(args.llmbench, [t.strip() for t in preds], [t.strip() for t in refs],
                          tmp, ["--no-split"]),
        }
    sents = sum(len(punkt.tokenize(t)) for t in refs) / len(refs)
    print("%d pairs from %d paragraphs of %s; references have %.1f Punkt sentences on average"
          % (len(refs), len(paras), args.docs, sents))
    print("%-9s %9s %9s %9s %9s %9s" % ("split", "rouge1", "rouge2", "rougeL", "rougeLsum",
                                          "d(Lsum)"))
    base = runs["punkt"]["rougeLsum"]
    for name, r in runs.items():
        print("%-9s %9.4f %9.4f %9.4f %9.4f %+9.4f" % (name, r["rouge1"], r["rouge2"],
                                                       r["rougeL"], r["rougeLsum"],
                                                       r["rougeLsum"] - base))


if __name__ == "__main__":
    main()
