#!/usr/bin/env bash
# All of Autobahn's compression cases (12.* and 13.*) against `wstune serve --deflate`; CI runs
# a spread of them (tests/serving/server.rs). Takes ~15 minutes: the suite's Python 2 deflate is the
# bottleneck, not the server. Prints the behaviour counts and any case that is not OK, and fails
# when a case differs from tests/autobahn/expected-compression-full.json (the committed full run).
set -euo pipefail
cd "$(dirname "$0")/.."
PY2="${AUTOBAHN_PYTHON:-$(pyenv root)/versions/2.7.18/bin/python}"
SITE="${AUTOBAHN_SITE:-$PWD/target/autobahn}"
[ -d "$SITE/autobahntestsuite" ] || "$PY2" -m pip install -q --target "$SITE" autobahntestsuite
cargo build --release -q -p wstune
PORT=19301
target/release/wstune serve --port $PORT --admin off --deflate --max-frame 16777216 --max-message 16777216 >/dev/null 2>&1 &
SPID=$!; trap 'kill $SPID 2>/dev/null' EXIT
sleep 1
DIR=$(mktemp -d)
cat > "$DIR/spec.json" <<JSON
{"outdir": "./reports", "servers": [{"agent": "wstune", "url": "ws://127.0.0.1:$PORT"}],
 "cases": ["12.*", "13.*"], "exclude-cases": [], "exclude-agent-cases": {}}
JSON
(cd "$DIR" && "$PY2" -c "import site, sys
site.addsitedir('$SITE')
sys.argv = ['wstest', '-m', 'fuzzingclient', '-s', 'spec.json']
from autobahntestsuite.wstest import run
run()" >/dev/null)
python3 - "$DIR/reports/index.json" tests/autobahn/expected-compression-full.json <<'PY'
import collections, json, sys
d = json.load(open(sys.argv[1]))["wstune"]
print(collections.Counter((v["behavior"], v["behaviorClose"]) for v in d.values()))
for k, v in sorted(d.items()):
    if v["behavior"] != "OK" or v["behaviorClose"] != "OK":
        print(k, v["behavior"], v["behaviorClose"])
# The committed full-suite baseline: any case that differs from it fails the run.
base = json.load(open(sys.argv[2]))
worse = [k for k, want in base.items()
         if (d.get(k, {}).get("behavior"), d.get(k, {}).get("behaviorClose"))
         != (want["behavior"], want["behaviorClose"])]
for k in worse:
    print("differs from the baseline:", k, d.get(k))
sys.exit(1 if worse else 0)
PY
