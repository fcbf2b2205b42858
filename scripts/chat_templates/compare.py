"""Real chat templates rendered by transformers (jinja2) and by tl (minijinja), compared.

  compare.py golden TEMPLATE_DIR GOLDEN_JSON   renders every *.jinja with transformers
  compare.py check GOLDEN_JSON TL_JSON         compares tl's renderings with them

Run by scripts/check_chat_templates.sh. `check` exits 1 when a template that transformers
renders renders differently (or not at all) in tl; a template transformers refuses may
render in tl (listed as lenient).
"""
import json
import pathlib
import sys

CONVERSATIONS = {
    "system_turns": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi there!"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": " Say \"quotes\" & <tags>, über-ñ. "},
    ],
    "one_user": [{"role": "user", "content": "What is 2+2?"}],
}


def golden(tdir, out):
    from transformers.utils.chat_template_utils import render_jinja_template

    result = {}
    for path in sorted(pathlib.Path(tdir).glob("*.jinja")):
        per = {}
        for name, conv in CONVERSATIONS.items():
            try:
                r, _ = render_jinja_template(
                    conversations=[conv], chat_template=path.read_text(), add_generation_prompt=True,
                    bos_token="<s>", eos_token="</s>",
                )
                per[name] = {"text": r[0]}
            except Exception as e:  # noqa: BLE001 - the refusal is the golden output
                per[name] = {"error": f"{type(e).__name__}: {e}"}
        result[path.name] = per
    pathlib.Path(out).write_text(json.dumps({"conversations": CONVERSATIONS, "templates": result}, indent=1))
    print(f"compare.py: {len(result)} templates rendered by transformers")


def check(golden_path, tl_path):
    want = json.loads(pathlib.Path(golden_path).read_text())["templates"]
    got = json.loads(pathlib.Path(tl_path).read_text())
    same = both_refuse = lenient = bad = 0
    for tmpl in sorted(want):
        for conv, w in want[tmpl].items():
            g = got.get(tmpl, {}).get(conv, {"error": "not rendered"})
            if "text" in w and g == w:
                same += 1
            elif "error" in w and "error" in g:
                both_refuse += 1
            elif "error" in w:
                lenient += 1
                print(f"lenient  {tmpl} / {conv}: transformers: {w['error'][:120]}")
            else:
                bad += 1
                print(f"DIFFERS  {tmpl} / {conv}\n  transformers: {w['text'][:300]!r}\n  tl: {str(g)[:300]!r}")
    print(f"compare.py: {same} identical, {both_refuse} refused by both, {lenient} lenient, {bad} different")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    {"golden": golden, "check": check}[sys.argv[1]](*sys.argv[2:])
