//! The book (docs/, built by mdbook) as a reader sees it: every page in headless Chromium at
//! 1280 px, every table and code block measured against the content column, and a screenshot
//! of the landing page for a person to look at. (src/report/book.rs checks the links.)

use crate::common;

use std::path::Path;
use std::time::Duration;

/// The book built into `out` with `mdbook build docs -d OUT`, or None (a recorded skip) where
/// mdbook is not installed. A warning fails the build, as in CI.
fn build_book(out: &Path) -> Option<()> {
    if !common::have("mdbook") {
        common::skip(
            "book",
            "no mdbook here (cargo install --locked mdbook@0.4.52)",
        );
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = common::run_bounded(
        std::process::Command::new("mdbook")
            .current_dir(root)
            .args(["build", "docs", "-d"])
            .arg(out),
        Duration::from_secs(60),
    );
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.status.success() && !log.contains("[WARN]") && !log.contains("[ERROR]"),
        "mdbook build docs: {log}"
    );
    Some(())
}

/// Every chapter page of the built book, relative to `out` (not the print page, which holds
/// them all again, nor mdbook's 404 and sidebar pages).
fn chapters(out: &Path) -> Vec<String> {
    fn walk(dir: &Path, out: &Path, pages: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(out).unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                walk(&p, out, pages);
            } else if rel.ends_with(".html")
                && !["print.html", "404.html", "toc.html"].contains(&rel.as_str())
            {
                pages.push(rel);
            }
        }
    }
    let mut pages = Vec::new();
    walk(out, out, &mut pages);
    pages.sort();
    pages
}

/// Measures every page in an iframe 1280 px wide and writes the result in the title: `P=` pages
/// measured, `T=` tables, `C=` the narrowest content column (px), `BAD=` how many elements are
/// wider than their column, then one word per such element (`PAGE:WHAT:WIDTH/COLUMN`). A code
/// block may be wider than the column only inside its own scrolling box.
const PROBE: &str = r#"<script>
window.addEventListener('load', function () {
  var bad = [], tables = 0, pages = 0, narrowest = 100000;
  document.querySelectorAll('iframe').forEach(function (f) {
    var page = f.dataset.page, d = f.contentDocument;
    if (!d || !d.querySelector('main')) { bad.push(page + ':unreadable'); return; }
    pages++;
    var main = d.querySelector('main'), col = main.getBoundingClientRect().width;
    narrowest = Math.min(narrowest, Math.round(col));
    var over = function (w) { return w > col + 1; };
    var note = function (what, w) { bad.push(page + ':' + what + ':' + Math.round(w) + '/' + Math.round(col)); };
    main.querySelectorAll('table').forEach(function (t, i) {
      tables++;
      var w = t.getBoundingClientRect().width;
      if (over(w)) note('table' + (i + 1), w);
    });
    main.querySelectorAll('pre').forEach(function (pre, i) {
      var w = pre.getBoundingClientRect().width;
      if (over(w)) note('pre' + (i + 1), w);
      // Wider text inside is fine where the block (or its code element, as highlight.js
      // sets it) scrolls it in its own box: then the block itself does not overflow.
      var ox = d.defaultView.getComputedStyle(pre).overflowX;
      if (pre.scrollWidth > pre.clientWidth + 1 && ox !== 'auto' && ox !== 'scroll') {
        note('pre' + (i + 1) + '-unscrolled', pre.scrollWidth);
      }
    });
    if (main.scrollWidth > main.clientWidth + 1) note('column', main.scrollWidth);
    if (d.documentElement.scrollWidth > 1281) note('page', d.documentElement.scrollWidth);
  });
  document.title = 'P=' + pages + ' T=' + tables + ' C=' + narrowest + ' BAD=' + bad.length + ' ' + bad.join(' ');
});
</script>"#;

/// Headless Chromium on `page` at 1280x900 with `mode` (`--dump-dom`, `--screenshot=FILE`).
/// Unlike common's, the page may read other pages of the book (its iframes): file:// pages are
/// each an origin of their own otherwise.
fn chromium_reading_files(browser: &str, page: &Path, mode: &str) -> std::process::Output {
    let (mut cmd, _profile) = common::chromium_command(
        browser,
        page,
        "1280,900",
        mode,
        &["--allow-file-access-from-files"],
    );
    common::run_bounded(&mut cmd, Duration::from_secs(90))
}

/// The pages SUMMARY.md lists: what the book must have rendered.
fn summary_pages() -> usize {
    let summary =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/SUMMARY.md"))
            .unwrap();
    summary.matches(".md)").count()
}

#[test]
fn every_page_of_the_book_fits_its_column_at_1280_px() {
    let Some(browser) = common::chromium() else {
        return common::skip("chromium", "no chromium here (apt-get install chromium)");
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("book");
    if build_book(&out).is_none() {
        return;
    }
    let pages = chapters(&out);
    assert_eq!(
        pages.len(),
        summary_pages(),
        "one page per chapter: {pages:?}"
    );
    let frames: String = pages
        .iter()
        .map(|p| {
            format!(
                "<iframe data-page=\"{p}\" src=\"{p}\" width=\"1280\" height=\"900\"></iframe>\n"
            )
        })
        .collect();
    let probe = out.join("probe.html");
    std::fs::write(
        &probe,
        format!("<!doctype html><html><head><title>probe</title></head><body>\n{frames}{PROBE}</body></html>"),
    )
    .unwrap();
    let o = chromium_reading_files(browser, &probe, "--dump-dom");
    let dom = String::from_utf8_lossy(&o.stdout);
    let title = dom
        .split("<title>")
        .nth(1)
        .and_then(|t| t.split("</title>").next())
        .unwrap_or_else(|| {
            panic!(
                "no title in the DOM: {dom}{}",
                String::from_utf8_lossy(&o.stderr)
            )
        });
    let field = |k: &str| -> u32 {
        title
            .split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {title:?}"))
    };
    assert_eq!(field("P=") as usize, pages.len(), "pages measured: {title}");
    // The measure means something only where the column is mdbook's 750 px beside the sidebar
    // and the book has its tables.
    assert!(
        (600..=760).contains(&field("C=")),
        "the content column: {title}"
    );
    assert!(field("T=") >= 20, "tables measured: {title}");
    assert_eq!(
        field("BAD="),
        0,
        "wider than the content column at 1280 px (PAGE:ELEMENT:WIDTH/COLUMN): {title}"
    );

    // A screenshot of the landing page, kept under target/ for a person to look at.
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("book");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join("landing-1280.png");
    let _ = std::fs::remove_file(&shot);
    let o = chromium_reading_files(
        browser,
        &out.join("index.html"),
        &format!("--screenshot={}", shot.display()),
    );
    assert!(
        shot.metadata().is_ok_and(|m| m.len() > 10_000),
        "no screenshot: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("the book's landing page at 1280 px: {}", shot.display());
}
