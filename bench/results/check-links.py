#!/usr/bin/env python3
# Every relative link and #anchor in the given Markdown files resolves (a file, or a heading or
# <a id> in it). Usage: python3 bench/results/check-links.py BENCHMARKS.md RELIABILITY.md bench/results/*.md
import re,sys,os
def slug(h):
    h=re.sub(r'<[^>]+>','',h).strip().lower()
    h=re.sub(r'[^\w\- ]','',h); return h.replace(' ','-')
def anchors(f):
    t=open(f).read()
    a=set(re.findall(r'<a id="([^"]+)"',t))
    a|={slug(m) for m in re.findall(r'^#+ (.*)$',t,re.M)}
    return a
bad=0
for f in sys.argv[1:]:
    t=open(f).read(); d=os.path.dirname(f) or '.'
    for tgt in re.findall(r'\]\(([^)\s]+)\)',t):
        if tgt.startswith('http'): continue
        path,_,frag=tgt.partition('#')
        p=os.path.normpath(os.path.join(d,path)) if path else f
        if not os.path.exists(p): print(f,'missing file',tgt); bad=1; continue
        if frag and frag not in anchors(p): print(f,'missing anchor',tgt); bad=1
sys.exit(bad)
