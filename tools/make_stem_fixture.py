#!/usr/bin/python3
"""Writes tests/fixtures/rouge/stem_nltk.tsv: word<TAB>stem pairs from NLTK's PorterStemmer.

The stem test (tests/test_stem.c) checks llmbench's stemmer against every pair. Words come
from three places, all lower-case [a-z0-9]+ as rouge tokens are:
  1. words that occur at least --min-count times in the man pages under --man-dir
     (real usage, including technical words);
  2. a deterministic sample of an English word list (--word-list, a JSON array such as
     the npm package an-array-of-english-words), filling the file up to --max-bytes;
  3. made-up words that put many stems in front of every suffix the rules know, runs of
     y, and tokens with digits, so that every rule and condition is exercised.

Usage (Debian's python3-nltk):
  npm install --prefix /tmp/wl an-array-of-english-words
  tools/make_stem_fixture.py --word-list \
      /tmp/wl/node_modules/an-array-of-english-words/index.json
"""
import argparse
import collections
import gzip
import hashlib
import json
import os
import re

import nltk
from nltk.stem.porter import PorterStemmer

WORD = re.compile(r"[a-z0-9]+")

# Suffixes that NLTK's rules test (steps 1a-5b and its extensions).
SUFFIXES = [
    "s", "ss", "sses", "ies", "ied", "eed", "ed", "ing", "y", "ational", "tional", "enci",
    "anci", "izer", "bli", "abli", "alli", "entli", "eli", "ousli", "ization", "ation",
    "ator", "alism", "iveness", "fulness", "ousness", "aliti", "iviti", "biliti", "fulli",
    "logi", "icate", "ative", "alize", "iciti", "ical", "ful", "ness", "al", "ance", "ence",
    "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "sion", "tion", "ion", "ou",
    "ism", "ate", "iti", "ous", "ive", "ize", "e", "ll", "ating", "bled", "izing", "hopping",
    "iest", "ily", "ingly", "edly", "ably", "ously", "ities", "ations", "ings",
]
STEMS = [
    "", "a", "b", "y", "ay", "by", "yy", "xyy", "ab", "ba", "tr", "ee", "tree", "by", "fil",
    "hop", "fall", "hiss", "fizz", "cont", "rel", "cond", "val", "hesit", "digit", "conform",
    "radic", "differ", "vil", "analog", "vietnam", "pred", "oper", "feud", "decis", "hope",
    "call", "form", "sensi", "tripl", "electr", "good", "reviv", "allow", "infer", "airlin",
    "gyroscop", "adjust", "defens", "irrit", "replac", "depend", "adopt", "homolog", "commun",
    "activ", "angular", "effect", "bowdler", "prob", "rat", "ceas", "contro", "ro", "geo",
    "theo", "archaeo", "philo", "spy", "fly", "dy", "happ", "enjoy", "sky", "toy", "syzyg",
    "ow", "ex", "w", "sw", "bo", "qu", "gen", "nat", "stat", "cr", "pl", "str", "spr",
]
EXTRA = [
    "1990s", "2000s", "h1n1", "mp3s", "covid19", "4x4s", "b52s", "a380s", "3d", "g20",
    "yyyy", "yyyyy", "ayyy", "byyy", "yay", "yyay", "sky", "skies", "dying", "lying",
    "tying", "news", "innings", "inning", "outings", "outing", "cannings", "canning",
    "howe", "proceed", "exceed", "succeed", "ties", "dies", "pies", "died", "spied",
    "feed", "agreed", "bled", "sing", "generously", "generalization", "controll",
]


def man_words(man_dir, min_count):
    counts = collections.Counter()
    for root, _, files in os.walk(man_dir):
        for name in files:
            if not name.endswith(".gz"):
                continue
            try:
                with gzip.open(os.path.join(root, name), "rt", errors="replace") as f:
                    counts.update(WORD.findall(f.read().lower()))
            except (OSError, EOFError):
                continue
    return {w for w, c in counts.items() if c >= min_count and len(w) <= 24}


def made_up_words():
    words = set(EXTRA)
    for stem in STEMS:
        for suffix in SUFFIXES:
            w = stem + suffix
            if w:
                words.add(w)
    return words


def rank(word):
    return hashlib.sha1(word.encode()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--man-dir", default="/usr/share/man")
    ap.add_argument("--min-count", type=int, default=3)
    ap.add_argument("--word-list", help="JSON array of words (optional)")
    ap.add_argument("--max-bytes", type=int, default=1_450_000)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                   "fixtures", "rouge", "stem_nltk.tsv"))
    args = ap.parse_args()

    stemmer = PorterStemmer()
    header = ("# word<TAB>stem from NLTK %s PorterStemmer() (NLTK_EXTENSIONS); "
              "written by tools/make_stem_fixture.py\n" % nltk.__version__)
    chosen = made_up_words() | man_words(args.man_dir, args.min_count)
    size = len(header) + sum(len(w) + len(stemmer.stem(w)) + 2 for w in chosen)
    if args.word_list:
        with open(args.word_list) as f:
            extra = sorted({w for w in json.load(f) if WORD.fullmatch(w)} - chosen, key=rank)
        for w in extra:
            line = len(w) + len(stemmer.stem(w)) + 2
            if size + line > args.max_bytes:
                break
            chosen.add(w)
            size += line
    with open(args.out, "w") as f:
        f.write(header)
        for w in sorted(chosen):
            f.write("%s\t%s\n" % (w, stemmer.stem(w)))
    print("%s: %d words, %d bytes" % (args.out, len(chosen), size))


if __name__ == "__main__":
    main()
