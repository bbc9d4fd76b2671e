// make_tokenizer_fixtures.mjs: the tokenizer test fixtures (tests/fixtures/tokenizer/), made
// from two npm packages that carry real vocabularies and their own encoders.
//
//   cd /tmp/tok && npm install js-tiktoken@1.0.21 llama3-tokenizer-js@1.2.0
//   node tools/make_tokenizer_fixtures.mjs /tmp/tok/node_modules tests/fixtures/tokenizer \
//        [/tmp/tok/llama3.tiktoken]
//
// Writes, in the tiktoken ranks format (one "base64(token bytes) rank" line per token):
//   gpt2.tiktoken          GPT-2 / r50k_base, all 50,256 ranks (js-tiktoken's ranks/gpt2)
//   llama3-subset.tiktoken the Llama 3 tokens that can occur while encoding the fixture
//                          texts (every vocabulary entry that is a substring of a pre-split
//                          piece), plus the 256 single bytes and the highest rank, with
//                          their original ranks
//   texts.json             {"texts": [{"text", "gpt2": [ids], "llama3": [ids]}]}: the ids
//                          js-tiktoken (special tokens allowed) and llama3-tokenizer-js
//                          (no bos/eos) produce
// and, given a third argument, the whole Llama 3 vocabulary (128,000 ranks, the content of
// Meta's tokenizer.model) there, for LB_TOKENIZER_LLAMA3 in tests/test_tokenizer.c.
//
// Why a subset is exact: byte-pair merging only ever looks up substrings of the piece it
// merges, and each step picks the lowest-ranked pair present. A vocabulary that keeps every
// token that is a substring of some piece, with its rank, offers each step the same pairs,
// so it gives the same ids on these texts as the whole vocabulary.
//
// Texts: English prose, code, numbers, whitespace runs, contractions in any case, accented
// Latin, Cyrillic, Greek, Arabic, Devanagari, CJK, emoji (with modifiers and joiners),
// special-token text, long runs (letters, spaces, newlines, digits), and seeded random
// mixtures of all of these. Characters on which JavaScript's regular expressions and
// tiktoken's disagree are left out: U+0085 and U+FEFF (JavaScript's \s differs) and
// U+017F and U+212A (JavaScript's replacement of (?i:...) folds case differently).
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [nodeModules, outDir, fullLlamaPath] = process.argv.slice(2);
if (!nodeModules || !outDir) {
  console.error('usage: node make_tokenizer_fixtures.mjs NODE_MODULES OUT_DIR [LLAMA3_FULL]');
  process.exit(2);
}
const load = (rel) => import(pathToFileURL(path.join(nodeModules, rel)).href);
const { Tiktoken } = await load('js-tiktoken/dist/lite.js');
const gpt2Ranks = (await load('js-tiktoken/dist/ranks/gpt2.js')).default;
const llama3 = (await load('llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js'))
  .default;

// ---- vocabularies as byte strings (latin1 strings: one char per byte) ----

// GPT-2's printable stand-ins for bytes, as used by byte-level BPE vocabularies on disk.
function unicodeToByte() {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  }
  const map = new Map();
  bs.forEach((b, i) => map.set(String.fromCharCode(cs[i]), b));
  return map;
}

function gpt2Vocab() {
  const ranks = new Map(); // latin1 bytes -> rank
  for (const line of gpt2Ranks.bpe_ranks.split('\n')) {
    if (!line) continue;
    const [, offset, ...tokens] = line.split(' ');
    tokens.forEach((t, i) => ranks.set(Buffer.from(t, 'base64').toString('latin1'), +offset + i));
  }
  return ranks;
}

function llama3Vocab() {
  const u2b = unicodeToByte();
  const ranks = new Map();
  for (let id = 0; id < 128000; id++) {
    const s = llama3.vocabById[id];
    const bytes = Array.from(s, (c) => {
      if (!u2b.has(c)) throw new Error(`llama3 token ${id} has a character outside the byte map`);
      return u2b.get(c);
    });
    ranks.set(Buffer.from(bytes).toString('latin1'), id);
  }
  return ranks;
}

function writeRanks(file, ranks) {
  const lines = [...ranks].sort((a, b) => a[1] - b[1])
    .map(([k, r]) => `${Buffer.from(k, 'latin1').toString('base64')} ${r}\n`);
  fs.writeFileSync(file, lines.join(''));
  console.log(`${file}: ${ranks.size} ranks, ${fs.statSync(file).size} bytes`);
}

// ---- texts ----

let seed = 20240521;
function rand() { // mulberry32
  seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const prose = [
  'The city council voted on Tuesday to extend the late-night bus service through the winter, citing a 14% rise in riders since March.',
  'Officials said the bridge, which carries about 42,000 vehicles a day, would reopen to traffic by the end of the month.',
  '"We were not told anything," said one resident, who asked not to be named. "The water just stopped."',
  'Shares in the company fell 3.2 per cent in early trading after it cut its full-year forecast for the second time.',
  'Rescue teams worked through the night to reach villagers cut off by the landslide, the regional governor told reporters.',
  'The report, published on Monday, found that nearly one in five schools had no qualified science teacher.',
  'Heavy rain is expected across the north-west, with up to 80mm falling on high ground and a risk of flooding.',
  'In a statement, the ministry said it "regrets the confusion" and would review how the figures were collected.',
  'The striker, 23, signed a four-year deal worth a reported £45m, ending weeks of speculation about his future.',
  'Scientists have found that the glacier is retreating faster than any model had predicted a decade ago.',
  'She won the election with 52.4% of the vote; turnout was the lowest since 1997.',
  'Police closed the motorway between junctions 4 and 5 after a lorry overturned shortly before 6am.',
  'The museum\'s new wing opens to the public on Saturday, after a three-year, $120 million renovation.',
  'Talks between the unions and management broke down late on Friday; a strike now looks likely.',
  'Analysts expect the central bank to hold interest rates at 5.25%, though some see a cut as early as June.',
  'It was the team\'s first win away from home this season, and it came in front of a crowd of 31,870.',
  'The company\'s chief executive, who has led it since 2015, will step down in the new year, it said.',
  'According to the census, the town\'s population grew from 8,200 in 2011 to just over 11,000 in 2021.',
  'Doctors warned that waiting lists could grow further if the dispute is not resolved before winter.',
  'Witnesses described hearing a loud bang at around 10:45pm, followed by sirens.',
];
const code = [
  'int main(int argc, char **argv) {\n    printf("hello, %s\\n", argv[0]);\n    return 0;\n}\n',
  'def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n',
  'for (size_t i = 0; i < n; i++) {\n\tsum += x[i] * y[i];\n}\n',
  '{"model": "llama3.1-8b", "max_tokens": 128, "stream": true, "temperature": 0.0}',
  'const xs = [1, 2, 3].map((x) => x * 2).filter(Boolean);\n',
  'if [ -z "$HOME" ]; then\n  echo "no home" >&2; exit 1\nfi\n',
  'SELECT id, name FROM users WHERE created_at >= \'2024-01-01\' ORDER BY id DESC LIMIT 10;',
  '#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n',
  'class Node:\n    def __init__(self, value, next=None):\n        self.value = value\n        self.next = next\n',
  'x=foo(bar,baz);y+=1;z<<=2;w&&=q||r;',
  '<div class="card"><p>Hello &amp; welcome</p></div>',
  'cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C build',
  '    // indented comment\n        return nullptr;\n',
  'fn main() { let v: Vec<u32> = (0..10).collect(); println!("{:?}", v); }',
  '$ curl -s http://127.0.0.1:8000/v1/completions -d @req.json | jq .usage',
];
function numbers() {
  const out = [];
  for (let k = 1; k <= 14; k++) out.push(String(int(10 ** (k - 1), 10 ** k - 1)));
  out.push('3.14159265358979', '6.02e23', '-0.000125', '1,234,567.89', '$19.99', '€1.299,00',
    '2024-05-17T08:30:00Z', '12:05:59', '+44 20 7946 0958', '0xDEADBEEF', '1/3 + 2/3 = 1',
    '99.9%', '10^9', '1e-9', '4x4', 'v1.2.3-rc4', 'ISO 8601', '0777', '1000000000000000000000');
  return out;
}
const whitespace = [
  ' ', '  ', '   ', '\t', '\t\t', '\n', '\n\n', '\n\n\n\n', '\r\n', '\r\n\r\n', ' \n ', '  \n\n  ',
  'a  b   c    d', 'end.   \n\nNext', '\t\tindented\n\t\t\tmore', 'trailing   ', '   leading',
  'x \t y', 'line\r\nline\rline\n', '\u00a0non-breaking\u00a0space', 'em\u2003space', ' \u3000 ideographic',
];
const scripts = [
  'café naïve résumé Zürich São Paulo Ærøskøbing', 'e\u0301 a\u0308 combining marks',
  'Москва — столица России.', 'Καλημέρα κόσμε', 'مرحبا بالعالم', 'שלום עולם',
  'नमस्ते दुनिया, यह एक परीक्षण है।', 'สวัสดีครับ', '你好，世界！今天天气很好。', '東京都は日本の首都です。',
  'ひらがなとカタカナ', '안녕하세요 세계', '😀😃😄 emoji', 'thumbs 👍🏽 up', 'family 👨‍👩‍👧‍👦 here',
  'flags 🇫🇷🇯🇵🇧🇷', '∑ x² ≤ ∞ → ∀ε>0', '“quoted” ‘single’ – en — em …', '¡Hola! ¿Qué tal?',
  '½ ¾ ① Ⅻ ٣ ४', 'mixed中文and English混合text', '🚀🚀🚀🚀🚀🚀', 'a\u200bzero\u200bwidth',
];
const contractions = [
  "I'm sure you're right, they've said we'll see; he'd go, she's gone.",
  "DON'T SHOUT! IT'S FINE. WE'RE HERE. THEY'VE LEFT. I'D KNOW. YOU'LL SEE. I'M OK.",
  "He'S wE'Re tHeY'vE i'M yOu'Ll i'D", "'tis the season", "rock'n'roll", "O'Neil's", "''s '''",
  "don't", "can't won't shan't", "it's", "the dogs' bones",
];
const specials = [
  'before<|endoftext|>after', '<|eot_id|>', 'system<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>',
  '<|begin_of_text|>Hello', '<|endoftext|><|endoftext|>', '<|not_a_token|>', '<|', '|>', '<|eot_id',
  '<|reserved_special_token_17|>', '<|python_tag|>print(1)',
];
function longRuns() {
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  let word = '';
  for (let i = 0; i < 3000; i++) word += letters[int(0, 25)];
  let digits = '';
  for (let i = 0; i < 1000; i++) digits += String(int(0, 9));
  return [word, 'a'.repeat(2000), ' '.repeat(2000), '\n'.repeat(500), digits,
    ' '.repeat(300) + 'x', '!'.repeat(400), '🙂'.repeat(200), 'ab'.repeat(700),
    'The ' + 'very '.repeat(300) + 'end.'];
}

const base = [...prose, ...code, ...numbers(), ...whitespace, ...scripts, ...contractions,
  ...specials, ...longRuns()];
const shortBase = base.filter((t) => t.length < 400);
const texts = [...base];
const seps = ['', ' ', '  ', '\n', '\n\n', '\t', ' \n', '. ', ', '];
while (texts.length < 420) {
  let t = '';
  const k = int(1, 6);
  for (let i = 0; i < k; i++) t += (i ? pick(seps) : '') + pick(shortBase);
  texts.push(t);
}

// ---- expected ids ----

const gpt2Enc = new Tiktoken(gpt2Ranks);
const records = texts.map((text) => ({
  text,
  gpt2: gpt2Enc.encode(text, 'all'),
  llama3: llama3.encode(text, { bos: false, eos: false }),
}));

// ---- the Llama 3 subset ----

const llamaRanks = llama3Vocab();
let maxLen = 0;
for (const k of llamaRanks.keys()) maxLen = Math.max(maxLen, k.length);
for (const k of llamaRanks.keys()) {
  if (/[0-9]{4}/.test(k)) throw new Error('a Llama 3 token holds four digits in a row');
}
const llamaSplit = new RegExp(
  "(?:'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" +
  "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 'gu');
const specialText = /<\|(?:begin_of_text|end_of_text|start_header_id|end_header_id|eot_id|eom_id|python_tag|finetune_right_pad_id|reserved_special_token_[0-9]+)\|>/g;
const subset = new Map();
for (let b = 0; b < 256; b++) {
  const k = String.fromCharCode(b);
  subset.set(k, llamaRanks.get(k));
}
for (const [k, r] of llamaRanks) if (r === 127999) subset.set(k, r);
for (const text of texts) {
  for (const part of text.split(specialText)) {
    for (const m of part.matchAll(llamaSplit)) {
      const bytes = Buffer.from(m[0], 'utf8').toString('latin1');
      for (let i = 0; i < bytes.length; i++) {
        for (let j = i + 1; j <= Math.min(bytes.length, i + maxLen); j++) {
          const s = bytes.slice(i, j);
          if (llamaRanks.has(s)) subset.set(s, llamaRanks.get(s));
        }
      }
    }
  }
}

fs.mkdirSync(outDir, { recursive: true });
writeRanks(path.join(outDir, 'gpt2.tiktoken'), gpt2Vocab());
writeRanks(path.join(outDir, 'llama3-subset.tiktoken'), subset);
if (fullLlamaPath) writeRanks(fullLlamaPath, llamaRanks);
const json = JSON.stringify({ texts: records });
fs.writeFileSync(path.join(outDir, 'texts.json'), json + '\n');
console.log(`texts.json: ${records.length} texts, ${json.length} bytes; longest Llama 3 token ${maxLen} bytes`);
