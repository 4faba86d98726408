//! `wstune report watch`: a real recording (`watch --record` while a listener with a backlog
//! of one overflows under a connect loop, in a private network namespace) rendered into one
//! HTML page, opened in headless Chromium: the charts and the moments advice fired are in the
//! rendered page and on the screenshot. And the recordings it refuses, each with the reason.

use crate::common;

use common::{code, in_netns, stderr, wstune};
use std::path::Path;
use std::process::Command;

/// A listener on 127.0.0.1:9001 with a backlog of one that never accepts, a connect loop that
/// overflows it for at most 8 s, and `watch --plain --count 5 -i 0.5 --record REC` meanwhile.
const RECORD: &str = r#"
set -e
ip link set lo up
python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 9001)); s.listen(1)
open(sys.argv[1], "w").close()
time.sleep(20)' "$DIR/ready" &
L=$!
for i in $(seq 200); do [ -e "$DIR/ready" ] && break; sleep 0.05; done
python3 -c '
import collections, socket, time
end = time.time() + 8; held = collections.deque()
while time.time() < end:
    c = socket.socket(); c.setblocking(False)
    try: c.connect(("127.0.0.1", 9001))
    except BlockingIOError: pass
    held.append(c)
    if len(held) > 400: held.popleft().close()
    time.sleep(0.005)' &
C=$!
sleep 0.3
"$WSTUNE" watch --plain --count 5 -i 0.5 --record "$DIR/rec.jsonl"
kill $C $L 2>/dev/null || true
"#;

/// Decodes an 8-bit RGB(A) PNG (what Chromium writes) with Python's zlib and prints the
/// number of distinct colours, then the pixels near the advice red (#cf222e) and near the
/// chart blue (#1f6feb).
const PNG_COLOURS: &str = r#"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat = 8, b""
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
bpp = 3 if ctype == 2 else 4
raw = zlib.decompress(idat)
stride = w * bpp
prev = bytearray(stride)
colours = {}
for y in range(h):
    f = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        k = bytes(line[x:x + 3])
        colours[k] = colours.get(k, 0) + 1
    prev = line
near = lambda rgb: sum(n for k, n in colours.items() if all(abs(k[i] - rgb[i]) <= 8 for i in range(3)))
print(len(colours), near((0xcf, 0x22, 0x2e)), near((0x1f, 0x6f, 0xeb)))
"#;

/// (distinct colours, advice-red pixels, chart-blue pixels) of a screenshot.
fn colours(png: &Path) -> (u64, u64, u64) {
    let o = Command::new("python3")
        .args(["-c", PNG_COLOURS])
        .arg(png)
        .output()
        .expect("python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let v: Vec<u64> = out.split_whitespace().map(|n| n.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

#[test]
fn a_recorded_overflow_renders_into_a_page_with_its_charts_and_advice_moments() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(o) = in_netns(&format!("DIR={}\n{RECORD}", d.display())) else {
        return;
    };
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let rec = d.join("rec.jsonl");
    let text = std::fs::read_to_string(&rec).unwrap();
    // The recording itself: a header and five frames in which the listener was full.
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    let frames: Vec<serde_json::Value> = lines[1..]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        frames.iter().any(|f| f["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["local"] == "127.0.0.1:9001" && l["full"] == true)),
        "the listener was never full: {text}"
    );

    let page = d.join("page.html");
    let o = wstune(&[
        "report",
        "watch",
        rec.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("5 frames, 3 pieces of advice"),
        "{}",
        stderr(&o)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: nothing fetched from elsewhere, nothing run.
    for outside in ["<script", "<link", "src=", "@import", "url(", "https:"] {
        assert!(!html.contains(outside), "the page has {outside:?}");
    }
    assert!(!html.contains("id=\"truncated\""));
    assert!(
        html.contains("<code>127.0.0.1:9001</code>"),
        "no listener row"
    );
    // The advice table lists each check once with its first and last moment and its count.
    for id in [
        "linux.net.core.somaxconn",
        "linux.counter.listen_overflows",
        "linux.counter.listen_drops",
    ] {
        assert_eq!(
            html.matches(&format!("<tr class=\"event\" data-id=\"{id}\">"))
                .count(),
            1,
            "{id} not listed once"
        );
    }
    assert!(
        html.contains("accept queue of 127.0.0.1:9001 full for"),
        "no timeline sentence"
    );

    let Some(browser) = common::chromium() else {
        return common::skip("chromium", "no chromium here (apt-get install chromium)");
    };
    // What the browser laid out: the chart of ListenOverflows is an <svg> with a size, and
    // advice moments are drawn on it and on the advice timeline. The measuring script goes
    // into a copy, never into the product's page; it writes its findings into the title.
    let probe = d.join("probe.html");
    std::fs::write(
        &probe,
        format!(
            "{html}<script>\
             const c = document.querySelector('figure[id=\"chart-TcpExt.ListenOverflows\"] svg.chart');\
             const r = c ? c.getBoundingClientRect() : {{width: 0, height: 0}};\
             const m = c ? [...c.querySelectorAll('rect.moment')].filter(e => e.getBoundingClientRect().width > 0).length : 0;\
             const t = document.querySelectorAll('#advice-timeline rect.moment').length;\
             document.title = 'CW=' + Math.round(r.width) + ' CH=' + Math.round(r.height) + ' CM=' + m + ' TM=' + t + \
             ' PW=' + document.documentElement.scrollWidth;</script>"
        ),
    )
    .unwrap();
    let (title, field) = common::chromium_title(browser, &probe, "1280,1600");
    assert!(
        field("CW=") > 300 && field("CH=") > 100,
        "the ListenOverflows chart is not laid out: {title}"
    );
    assert!(field("CM=") >= 1, "no advice moment on the chart: {title}");
    assert!(
        field("TM=") >= 3,
        "the advice timeline lacks a check: {title}"
    );
    assert!(
        field("PW=") <= 1280,
        "the page scrolls sideways at 1280 px: {title}"
    );
    // The product's own page, as a person sees it: not blank, with the advice bars' red and
    // the charts' blue lines drawn on the first screen.
    let shot = d.join("page.png");
    let o = common::chromium_on(
        browser,
        &page,
        "1280,1600",
        &format!("--screenshot={}", shot.display()),
    );
    assert!(
        shot.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (distinct, red, blue) = colours(&shot);
    assert!(distinct > 50, "a blank screenshot: {distinct} colours");
    assert!(
        red > 2_000,
        "the advice timeline's bars are not drawn: {red} red pixels"
    );
    assert!(blue > 200, "no chart line drawn: {blue} blue pixels");

    // The same recording killed while writing its last line: the whole frames render, and the
    // page says the last one was cut.
    let cut = d.join("cut.jsonl");
    std::fs::write(&cut, &text[..text.len() - lines[5].len() / 2 - 1]).unwrap();
    let cut_page = d.join("cut.html");
    let o = wstune(&[
        "report",
        "watch",
        cut.to_str().unwrap(),
        "-o",
        cut_page.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("4 frames") && stderr(&o).contains("cut short"),
        "{}",
        stderr(&o)
    );
    let cut_html = std::fs::read_to_string(&cut_page).unwrap();
    assert!(
        cut_html.contains("id=\"truncated\"") && cut_html.contains("<dd>4 ("),
        "no truncation note"
    );

    // Without -o the page goes to standard output.
    let o = wstune(&["report", "watch", rec.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).len(), html.len());
}

/// A missing file, a file that is not a recording, a recording of another format and one
/// without a whole frame: each refused with the reason and what to give instead, and no page
/// left behind.
#[test]
fn files_that_are_not_recordings_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("out.html");
    let refused = |file: &Path, want: &str| {
        let o = wstune(&[
            "report",
            "watch",
            file.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_ne!(code(&o), 0, "{} was rendered", file.display());
        let e = stderr(&o);
        assert!(
            e.contains(&file.display().to_string()) && e.contains(want),
            "{} -> {e}",
            file.display()
        );
        assert!(!e.contains("panicked"), "{e}");
        assert!(!out.exists(), "a page was written for {}", file.display());
    };
    refused(
        &d.join("missing.jsonl"),
        "no such file; give a file that `wstune watch --record FILE` wrote",
    );
    let json = d.join("report.json");
    std::fs::write(&json, "{\"schema_version\": 1, \"results\": []}\n").unwrap();
    refused(&json, "its first line is not a watch recording's header");
    let empty = d.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    refused(&empty, "the file is empty");
    let header = r#"{"recording":"wstune.watch-recording/1","frames":"wstune.watch/1","started":"2026-01-01T00:00:00Z","host":"h","interval_s":1.0,"wstune":"0.1.0","scope":"every listener"}"#;
    let bare = d.join("bare.jsonl");
    std::fs::write(&bare, format!("{header}\n")).unwrap();
    refused(&bare, "the recording has no whole frame");
    let other = d.join("other.jsonl");
    std::fs::write(
        &other,
        header.replace("watch-recording/1", "watch-recording/9") + "\n",
    )
    .unwrap();
    refused(&other, "a recording of format wstune.watch-recording/9");
    let garbled = d.join("garbled.jsonl");
    std::fs::write(&garbled, format!("{header}\nnot json\n{{}}\n")).unwrap();
    refused(&garbled, "line 2: not a frame");
    refused(d, "is a directory");
}
