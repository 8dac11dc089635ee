//! `ordo report` end to end with the real binary: HTML, Markdown and JSON carry the same numbers
//! as `ordo compare --json`; the Philly window's report renders in a real headless Chromium.

#![allow(clippy::unwrap_used)] // tests may panic on a broken expectation

mod common;
mod png;
mod run;

use serde_json::Value;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use png::png_pixels;
use run::{ok, ordo};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ordo-report-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Follows a dot-separated path through JSON; object keys may themselves contain dots
/// (policy parameters), so the longest matching key wins.
fn resolve<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return Some(v);
    }
    let segs: Vec<&str> = path.split('.').collect();
    for i in (1..=segs.len()).rev() {
        let key = segs[..i].join(".");
        let rest = segs[i..].join(".");
        let next = match v {
            Value::Object(m) => m.get(&key),
            Value::Array(a) => key.parse::<usize>().ok().and_then(|k| a.get(k)),
            _ => None,
        };
        if let Some(n) = next {
            if let Some(found) = resolve(n, &rest) {
                return Some(found);
            }
        }
    }
    None
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&#39;", "'").replace("&amp;", "&")
}

/// Every `data-key` cell of an HTML page: (key, data-value, shown text).
fn keyed_cells(html: &str) -> Vec<(String, f64, String)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find("data-key=\"") {
        rest = &rest[i + 10..];
        let key = unescape(&rest[..rest.find('"').unwrap()]);
        let j = rest.find("data-value=\"").unwrap() + 12;
        let value: f64 = rest[j..j + rest[j..].find('"').unwrap()].parse().unwrap();
        let t = rest.find('>').unwrap() + 1;
        let text = unescape(&rest[t..t + rest[t..].find('<').unwrap()]);
        out.push((key, value, text));
    }
    out
}

/// Checks that a shown number (`3.7d`, `93.0%`, `1296`) is `value` rounded as shown.
fn shown_matches(text: &str, value: f64) -> bool {
    let t = text.trim().replace(',', "");
    let t = t.as_str();
    let (num, scale) = match t.chars().last() {
        Some('s') => (&t[..t.len() - 1], 1.0),
        Some('m') => (&t[..t.len() - 1], 60.0),
        Some('h') => (&t[..t.len() - 1], 3600.0),
        Some('d') => (&t[..t.len() - 1], 86400.0),
        Some('%') => (&t[..t.len() - 1], 0.01),
        _ => (t, 1.0),
    };
    let Ok(x) = num.parse::<f64>() else { return false };
    let decimals = num.split_once('.').map_or(0, |(_, f)| f.len()) as i32;
    let tol = 0.5 * 10f64.powi(-decimals) * scale * 1.0001 + 1e-9;
    (x * scale - value).abs() <= tol
}

/// Every data-key number in `html` equals the JSON report's value, and is shown rounded from it.
fn check_numbers(html: &str, json: &Value) -> usize {
    let cells = keyed_cells(html);
    for (key, value, text) in &cells {
        let j = resolve(json, key).unwrap_or_else(|| panic!("data-key {key} not in the JSON"));
        let j = j.as_f64().unwrap_or_else(|| panic!("data-key {key}: JSON value {j} is not a number"));
        // serde_json's default float parser may land one ULP off the shortest representation
        // (it lacks `float_roundtrip`), so equal means within a few ULPs.
        assert!((value - j).abs() <= 4.0 * f64::EPSILON * j.abs(), "data-key {key}: page {value}, JSON {j}");
        assert!(shown_matches(text, j), "data-key {key}: shows `{text}` for {j}");
    }
    cells.len()
}

#[test]
fn html_md_and_json_agree_with_compare() {
    let base = ["--workload", "online", "--jobs", "400", "--policies", "fifo,sjf+easy,las", "--quiet"];
    let run = |out: &Path, extra: &[&str]| {
        let mut a: Vec<&str> = vec!["report"];
        a.extend(base);
        a.extend(["--out", out.to_str().unwrap(), "--gpu-hour-price", "2.10", "--currency", "eur"]);
        a.extend(extra);
        ok(&ordo(&a));
        std::fs::read_to_string(out).unwrap()
    };
    let html = run(&tmp("r.html"), &[]);
    let md = run(&tmp("r.md"), &[]);
    let json_text = run(&tmp("r.txt"), &["--out-format", "json"]);
    let json: Value = serde_json::from_str(&json_text).unwrap();
    let mut cmp_args = vec!["compare", "--json"];
    cmp_args.extend(base);
    let cmp: Value = serde_json::from_str(&ok(&ordo(&cmp_args))).unwrap();
    // The same runs: every metric of every policy, and the same headline words.
    for r in cmp["results"].as_array().unwrap() {
        let p = r["policy"].as_str().unwrap();
        assert_eq!(&json["metrics"][p], r, "metrics of {p}");
    }
    assert_eq!(json["headline"], cmp["headline"]);
    assert_eq!(json["policies"], serde_json::json!(["fifo", "sjf+easy", "las"]));
    // HTML: self-contained, every number equal to the JSON, one chart per section.
    assert!(html.starts_with("<!DOCTYPE html>"));
    // The only http:// is the SVG namespace name, which nothing fetches.
    let no_ns = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    assert!(
        !no_ns.contains("http://") && !no_ns.contains("https://") && !html.contains("<script"),
        "no URL, no script"
    );
    assert!(!no_ns.contains("src=") && !no_ns.contains("url("), "nothing loaded from elsewhere");
    let n = check_numbers(&html, &json);
    assert!(n > 100, "only {n} keyed numbers");
    let sections: Vec<&str> = html.split("<section").skip(1).collect();
    assert!(sections.len() >= 8, "{} sections", sections.len());
    for s in &sections {
        let s = &s[..s.find("</section>").unwrap()];
        assert_eq!(s.matches("<svg").count(), 1, "one chart per section: {}", &s[..80.min(s.len())]);
    }
    let headline = json["headline"].as_str().unwrap();
    assert!(html.contains(&headline.replace('>', "&gt;")) && md.contains(headline), "headline in HTML and MD");
    // Definitions from docs/METRICS.md in both.
    let def = "Jain's index over users of each user's mean bounded slowdown";
    assert!(html.contains(def) && md.contains(def), "METRICS.md definitions missing");
    assert!(html.contains("<td><code>idle_causes</code> [HOL GPU-h, frag GPU-h]</td>"));
    // Markdown shows the same cells as the HTML (the same table text).
    for (key, _, text) in keyed_cells(&html) {
        assert!(md.contains(&text), "MD lacks `{text}` ({key})");
    }
    // Cost: GPU-hours x price, currency upper-cased.
    assert_eq!(json["cost"]["price"]["currency"], "EUR");
    for p in ["fifo", "sjf+easy", "las"] {
        let row = &json["cost"]["per_policy"][p];
        let want = row["idle_gpu_hours_per_month"].as_f64().unwrap() * 2.10;
        assert!((row["idle_cost_per_month"].as_f64().unwrap() - want).abs() < 1e-6 * want.max(1.0));
    }
    // The equivalent-GPU search reports its probes; the first passing one meets the target.
    let e = &json["equivalent_gpus"];
    assert_eq!(e["baseline"], "fifo");
    let target = e["target_mean_jct_s"].as_f64().unwrap();
    if let Some(k) = e["extra_nodes"].as_u64() {
        let probes = e["probes"].as_array().unwrap();
        let at = |n: u64| probes.iter().find(|p| p["extra_nodes"].as_u64() == Some(n));
        assert!(at(k).unwrap()["mean_jct_s"].as_f64().unwrap() <= target);
        if k > 1 {
            assert!(at(k - 1).expect("the count below was probed")["mean_jct_s"].as_f64().unwrap() > target);
        }
    }
}

#[test]
fn bad_cost_and_policy_input_is_named() {
    let err = |a: &[&str]| {
        let out = ordo(a);
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let out = tmp("bad.html");
    let o = out.to_str().unwrap();
    let e = err(&["report", "--out", o, "--gpu-hour-price", "2", "--currency", "EU"]);
    assert!(e.contains("currency `EU`") && e.contains("three-letter"), "{e}");
    let e = err(&["report", "--out", o, "--gpu-hour-price=-1", "--currency", "EUR"]);
    assert!(e.contains("--gpu-hour-price") && e.contains("positive"), "{e}");
    let e = err(&["report", "--out", o, "--gpu-hour-price", "2"]);
    assert!(e.contains("--currency"), "{e}");
    let e = err(&["report", "--out", o, "--policies", "fifo,fifo"]);
    assert!(e.contains("fifo") && e.contains("twice"), "{e}");
}

#[test]
fn philly_report_renders_in_headless_chromium() {
    let Some(trace) = common::trace("philly/philly_rfold.csv") else { return };
    let chromium = Path::new("/usr/bin/chromium");
    if !chromium.is_file() {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI must have Chromium (.ci/run installs it)");
        let _ = writeln!(std::io::stderr(), "skipped: /usr/bin/chromium not found (apt-get install chromium)");
        return;
    }
    // Kept in the repository's target/ for a look (made here: a build elsewhere, with
    // CARGO_TARGET_DIR, leaves none).
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target");
    std::fs::create_dir_all(&target).unwrap();
    let html_path = target.join("report-philly.html");
    let json_path = tmp("philly.json");
    let all = "fifo,sjf,sgf,fifo+easy,sjf+easy,fifo+conservative,srtf,las,gittins,fair,priority,qssf,rr";
    let t = trace.to_str().unwrap();
    for out in [&html_path, &json_path] {
        let o = out.to_str().unwrap();
        let args = ["report", "--trace", t, "--from", "42", "--to", "49", "--policies", all, "--out", o];
        ok(&ordo(
            &[&args[..], &["--out-format", if o.ends_with(".json") { "json" } else { "html" }, "--quiet"]].concat(),
        ));
    }
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(json["input"]["jobs"], 7729);
    let html_len = std::fs::metadata(&html_path).unwrap().len();
    assert!(html_len < 3 << 20, "the page stays small: {html_len} bytes");
    let url = format!("file://{}", html_path.canonicalize().unwrap().display());
    let shot = target.join("report-screenshot.png");
    let _ = std::fs::remove_file(&shot);
    let chrome = |extra: &[&str]| {
        let mut c = Command::new(chromium);
        c.args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]).args(extra).arg(&url);
        let out = c.output().expect("chromium runs");
        assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
        out
    };
    chrome(&[&format!("--screenshot={}", shot.display()), "--window-size=1400,5000"]);
    let png = std::fs::read(&shot).expect("Chromium wrote the screenshot");
    assert!(png.len() > 100_000, "screenshot only {} bytes", png.len());
    let (w, h, bpp, px) = png_pixels(&png);
    assert_eq!((w, h), (1400, 5000));
    let mut colours = std::collections::HashSet::new();
    let mut non_white = 0usize;
    for p in px.chunks(bpp) {
        colours.insert((p[0], p[1], p[2]));
        non_white += usize::from(p[0] < 200 || p[1] < 200 || p[2] < 200);
    }
    assert!(colours.len() > 50, "screenshot has {} colours", colours.len());
    assert!(non_white > (w * h / 50) as usize, "screenshot is nearly blank: {non_white} dark pixels");
    // The DOM Chromium rendered: one chart per section, every number equal to the JSON.
    let dom = String::from_utf8(chrome(&["--dump-dom"]).stdout).unwrap();
    let sections: Vec<&str> = dom.split("<section").skip(1).collect();
    assert_eq!(sections.len(), 8, "sections in the rendered page");
    for s in &sections {
        let s = &s[..s.find("</section>").unwrap()];
        assert_eq!(s.matches("<svg").count(), 1, "one chart per section: {}", &s[..80.min(s.len())]);
        assert!(s.contains("<text"), "chart text drawn as SVG text");
    }
    let n = check_numbers(&dom, &json);
    assert!(n > 500, "only {n} keyed numbers in the rendered page");
    for label in ["allocated GPUs", "waiting jobs", "job completion time (log scale)", "time since first submit (days)"]
    {
        assert!(dom.contains(label), "axis title `{label}` missing");
    }
    // The equivalent-GPU probes are the baseline's real mean JCT on the larger cluster.
    let e = &json["equivalent_gpus"];
    let probe = &e["probes"][0];
    let k = probe["extra_nodes"].as_u64().unwrap();
    let cluster = format!("{}x8,{k}x8", json["gpus"].as_u64().unwrap() / 8);
    let c = ok(&ordo(&[
        "compare",
        "--json",
        "--trace",
        t,
        "--from",
        "42",
        "--to",
        "49",
        "--policies",
        "fifo",
        "--cluster",
        &cluster,
    ]));
    let c: Value = serde_json::from_str(&c).unwrap();
    assert_eq!(c["results"][0]["mean_jct_s"], probe["mean_jct_s"], "probe at {k} extra nodes");
}

/// Checks the laid-out page from inside Chromium and writes what it found into the DOM:
/// horizontal overflow of the page and of every table box, SVG text outside its picture, and
/// legend swatches on another line than their names.
const LAYOUT_CHECK: &str = r#"<script>
(function () {
  var bad = [];
  var de = document.documentElement;
  if (de.scrollWidth > window.innerWidth) bad.push('page ' + de.scrollWidth + 'px wide at ' + window.innerWidth + 'px');
  document.querySelectorAll('.scroll').forEach(function (d, i) {
    if (d.scrollWidth > d.clientWidth + 1) bad.push('table ' + i + ' (' + (d.querySelector('th') || {}).textContent + ') needs ' + d.scrollWidth + 'px of ' + d.clientWidth);
  });
  document.querySelectorAll('svg').forEach(function (svg, i) {
    var r = svg.getBoundingClientRect();
    svg.querySelectorAll('text').forEach(function (t) {
      var b = t.getBoundingClientRect();
      if (b.width > 0 && (b.left < r.left - 1 || b.top < r.top - 1 || b.right > r.right + 1 || b.bottom > r.bottom + 1))
        bad.push('chart ' + i + ': text "' + t.textContent.trim() + '" outside the picture');
    });
  });
  document.querySelectorAll('.legend .item').forEach(function (it) {
    var s = it.querySelector('.swatch').getBoundingClientRect(), n = it.querySelector('.name').getBoundingClientRect();
    if (s.top > n.bottom || s.bottom < n.top) bad.push('legend swatch apart from "' + it.textContent + '"');
    if (n.right > it.parentNode.getBoundingClientRect().right + 1) bad.push('legend name cut: "' + it.textContent + '"');
  });
  var legends = document.querySelectorAll('.legend').length;
  var out = document.createElement('pre');
  out.id = 'layout-result';
  out.textContent = 'checked ' + document.querySelectorAll('.scroll').length + ' tables, ' + document.querySelectorAll('svg').length + ' charts, ' + legends + ' legends; problems: ' + bad.length + '\n' + bad.join('\n');
  document.body.appendChild(out);
})();
</script>"#;

/// At 1,400 px, with ten policies of which two have long names, nothing is clipped: no table
/// needs scrolling, no chart text leaves its picture, every legend keeps swatch and name
/// together, and the baseline and best lines are drawn bold.
#[test]
fn ten_policies_fit_at_1400_px_in_chromium() {
    let chromium = Path::new("/usr/bin/chromium");
    if !chromium.is_file() {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI must have Chromium (.ci/run installs it)");
        let _ = writeln!(std::io::stderr(), "skipped: /usr/bin/chromium not found (apt-get install chromium)");
        return;
    }
    let policies = "fifo,sjf,sgf,fifo+easy,sjf+easy,fifo+conservative,srtf,las,\
las:thresholds=10/30/100/300/1000/3000/10000/30000/100000/300000/1000000/3000000,within=gpus,\
priority:age=1000,fairshare=0,size=-10000,qos=0,half_life=604800,max_age=86400+easy";
    // Kept in the repository's target/ for a look (made here: a build elsewhere, with
    // CARGO_TARGET_DIR, leaves none).
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target");
    std::fs::create_dir_all(&target).unwrap();
    let page = target.join(format!("report-1400-{}.html", std::process::id()));
    let p = page.to_str().unwrap();
    let args = ["report", "--quiet", "--workload", "online", "--jobs", "600", "--policies", policies, "--out", p];
    ok(&ordo(&[&args[..], &["--gpu-hour-price", "2.10", "--currency", "EUR"]].concat()));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("stroke-width=\"3\"") && html.contains("stroke-width=\"1\""), "bold and pale lines");
    let (_, result) = laid_out(chromium, &page, &html);
    assert!(result.contains("problems: 0\n"), "{result}");
    assert!(result.contains("checked ") && !result.contains(" 0 tables"), "{result}");
    let _ = std::fs::remove_file(&page);
}

/// `html` with [`LAYOUT_CHECK`] written to `page` and laid out by headless Chromium at 1,400 px:
/// the DOM after the check ran, and the check's result text.
fn laid_out(chromium: &Path, page: &Path, html: &str) -> (String, String) {
    std::fs::write(page, html.replace("</body>", &format!("{LAYOUT_CHECK}</body>"))).unwrap();
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    let out = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,2000"])
        .args(["--virtual-time-budget=2000", "--dump-dom"])
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    let dom = String::from_utf8(out.stdout).unwrap();
    let at = dom.find("id=\"layout-result\"").expect("the layout check ran");
    let result = unescape(&dom[at..dom[at..].find("</pre>").map_or(dom.len(), |e| at + e)]);
    (dom, result)
}

/// Runs `ordo report` with `args` and the price 2.10 EUR into `name` (its format from the
/// extension) and returns the file's text.
fn priced_report(name: &str, args: &[&str]) -> String {
    let out = tmp(name);
    let mut a = vec!["report", "--quiet", "--gpu-hour-price", "2.10", "--currency", "EUR", "--out"];
    a.push(out.to_str().unwrap());
    a.extend(args);
    ok(&ordo(&a));
    std::fs::read_to_string(&out).unwrap()
}

/// Issue 35, finding 7: the equivalent GPUs are in money per month at the given price, the
/// idle capacity the order cannot change (no job waiting) is apart from what it changes (idle
/// while jobs waited, by cause) and not in the chart, and the parts add up to the whole.
#[test]
fn equivalent_gpus_in_money_and_the_loads_idle_capacity_apart() {
    let args = ["--policies", "fifo,sgf,las"];
    let json: Value = serde_json::from_str(&priced_report("money.json", &args)).unwrap();
    let html = priced_report("money.html", &args);
    let md = priced_report("money.md", &args);
    let e = &json["equivalent_gpus"];
    let g = e["extra_gpus"].as_f64().expect("the default workload's target is reached");
    assert_eq!(e["cost_per_month"].as_f64(), Some(g * 720.0 * 2.10), "{e}");
    assert!(html.contains("data-key=\"equivalent_gpus.cost_per_month\""), "no money on the equivalent GPUs");
    let money = ordo_report::fmt::thousands(g * 720.0 * 2.10);
    assert!(md.contains(&format!("Equivalent GPUs: {}, worth EUR {money} per month", g as u64)), "{md}");
    check_numbers(&html, &json);
    for (p, row) in json["cost"]["per_policy"].as_object().unwrap() {
        let x = |k: &str| row[k].as_f64().unwrap();
        let parts = x("idle_wait_gpu_hours_per_month") + x("idle_empty_gpu_hours_per_month");
        assert!((parts - x("idle_gpu_hours_per_month")).abs() < 1e-6 * x("idle_gpu_hours_per_month"), "{p}: {row}");
        let causes = x("head_of_line_gpu_hours_per_month") + x("fragmentation_gpu_hours_per_month");
        assert!((causes - x("idle_wait_gpu_hours_per_month")).abs() < 1e-6 * (1.0 + causes), "{p}: {row}");
        assert_eq!(row["idle_empty_cost_per_month"].as_f64(), Some(x("idle_empty_gpu_hours_per_month") * 2.10));
    }
    // The cost chart draws only what the order changes; the load's part is a sentence apart.
    let cost = &html[html.find("<section id=\"cost\"").unwrap()..];
    let cost = &cost[..cost.find("</section>").unwrap()];
    let svg = &cost[cost.find("<svg").unwrap()..cost.find("</svg>").unwrap()];
    assert!(!svg.contains("all idle capacity") && svg.contains("head-of-line"), "{svg}");
    assert!(html.contains("Not the order's to change: under fifo, "), "the load's idle capacity is not apart");
    assert!(md.contains("no order can put them to work"), "{md}");
}

/// Issue 35, finding 7: the headline names a p99-wait or fairness regression of the policy it
/// picks and offers the best policy without one (the default workload: sgf's fairness 0.54
/// against fifo's 0.70; las has none).
#[test]
fn the_headline_names_a_regression_and_the_best_policy_without_one() {
    let v: Value =
        serde_json::from_str(&ok(&ordo(&["compare", "--json", "--quiet", "--policies", "fifo,sgf,las"]))).unwrap();
    assert_eq!(v["best"], "sgf");
    let h = v["headline"].as_str().unwrap();
    assert!(h.contains("Regression: sgf's fairness over users is lower than fifo's (0.70 -> 0.54"), "{h}");
    assert!(h.contains("Best without a regression in p99 wait or fairness: las: "), "{h}");
    assert_eq!(v["best_without_regression"], "las");
    assert_eq!(v["regressions"][0]["measure"], "fairness_users");
    // The report says the same words, and keeps them in its JSON.
    let r: Value = serde_json::from_str(&priced_report("regress.json", &["--policies", "fifo,sgf,las"])).unwrap();
    assert_eq!(r["headline"].as_str(), Some(h));
    assert_eq!(r["best_without_regression"], "las");
    // No regression, no such sentence: fifo against las alone.
    let v: Value = serde_json::from_str(&ok(&ordo(&["compare", "--json", "--policies", "fifo,las"]))).unwrap();
    assert!(!v["headline"].as_str().unwrap().contains("Regression"), "{}", v["headline"]);
    assert_eq!(v["best_without_regression"], Value::Null);
}

/// Issue 35, finding 7: on the Philly window the headline's las has a p99 wait 20% longer
/// than fifo's; the headline says so and offers sgf, which shortens both.
#[test]
fn philly_headline_names_las_p99_wait_regression() {
    let Some(trace) = common::trace("philly/philly_rfold.csv") else { return };
    let t = trace.to_str().unwrap();
    let args = ["compare", "--json", "--trace", t, "--from", "42", "--to", "49", "--policies", "fifo,sgf,srtf,las"];
    let v: Value = serde_json::from_str(&ok(&ordo(&args))).unwrap();
    let h = v["headline"].as_str().unwrap();
    assert_eq!(v["best"], "las");
    assert!(h.contains("p99 wait +20%. Regression: las's p99 wait is longer than fifo's (9.7d -> 11.7d)."), "{h}");
    assert!(h.contains("Best without a regression in p99 wait or fairness: sgf: "), "{h}");
    // A week of arrivals (6.98 days, shown as 7.0) is not warned about as a short history.
    let out = tmp("philly-week.json");
    let o = out.to_str().unwrap();
    let a =
        ["report", "--quiet", "--no-equivalent", "--trace", t, "--from", "42", "--to", "49", "--policies", "fifo,las"];
    ok(&ordo(&[&a[..], &["--out", o]].concat()));
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(ordo_report::model::days(j["cost"]["basis_days"].as_f64().unwrap()) == "7.0 days", "{}", j["cost"]);
    assert_eq!(j["cost"]["short_history"], Value::Null);
}

/// Issue 35, finding 7: a baseline figure that shows as 0s gives no percentage ("-100%"):
/// fifo's p99 wait here is 0.4 s, sgf's 0.
#[test]
fn a_baseline_that_rounds_to_zero_gives_no_percentage() {
    let mut rows = vec!["job_id,submit_time,num_gpu,duration".to_string(), "a,0,1,10".into()];
    rows.extend(["b,9.6,2,1".to_string(), "c,9.7,1,1".into()]);
    rows.extend((1..=98).map(|i| format!("f{i},{},1,1", 1000 * i)));
    let t = tmp("zero.csv");
    std::fs::write(&t, rows.join("\n") + "\n").unwrap();
    let v: Value = serde_json::from_str(&ok(&ordo(&[
        "compare",
        "--json",
        "--trace",
        t.to_str().unwrap(),
        "--cluster",
        "1x2",
        "--policies",
        "fifo,sgf",
    ])))
    .unwrap();
    let (f, s) = (&v["results"][0], &v["results"][1]);
    assert!((f["p99_wait_s"].as_f64().unwrap() - 0.4).abs() < 1e-9 && s["p99_wait_s"] == 0.0, "{v}");
    let h = v["headline"].as_str().unwrap();
    assert!(!h.contains("-100%") && h.contains("p99 wait 0s in both"), "{h}");
}

/// Issue 35, finding 7: money per month from a short history says how many days it rests on,
/// and warns when they are fewer than seven.
#[test]
fn money_from_a_short_history_says_the_days_it_rests_on() {
    // Arrivals over 1.1 days (95,040 s) on one 8-GPU node.
    let mut rows = vec!["job_id,submit_time,num_gpu,duration".to_string()];
    rows.extend((0..=44).map(|i| format!("j{i},{},{},{}", i * 2160, 1 + i % 4, 3600 + 600 * (i % 5))));
    let t = tmp("short.csv");
    std::fs::write(&t, rows.join("\n") + "\n").unwrap();
    let args = ["--trace", t.to_str().unwrap(), "--cluster", "1x8", "--policies", "fifo,sgf"];
    let json: Value = serde_json::from_str(&priced_report("short.json", &args)).unwrap();
    assert!((json["cost"]["basis_days"].as_f64().unwrap() - 1.1).abs() < 1e-9, "{}", json["cost"]);
    let w = json["cost"]["short_history"].as_str().expect("a short-history warning");
    assert!(w.contains("extrapolated from only 1.1 days"), "{w}");
    let html = priced_report("short.html", &args);
    assert!(html.contains("id=\"short-history\"") && html.contains("extrapolated from only 1.1 days"), "no warning");
    let md = priced_report("short.md", &args);
    assert!(md.contains("**Warning:** the figures per month are extrapolated from only 1.1 days"), "{md}");
    assert!(md.contains("scaled from 1.1 days of history"), "{md}");
}

/// Issue 35, finding 7: every page carries the date and the ordo version (HTML at the top and
/// the bottom, Markdown at the top, JSON as fields); `SOURCE_DATE_EPOCH` fixes the date.
#[test]
fn every_page_carries_the_date_and_the_ordo_version() {
    let version = env!("CARGO_PKG_VERSION");
    let run = |name: &str| {
        let out = tmp(name);
        let o = out.to_str().unwrap();
        let args = ["report", "--quiet", "--workload", "online", "--jobs", "200", "--policies", "fifo,sgf"];
        let got = Command::new(env!("CARGO_BIN_EXE_ordo"))
            .args(args)
            .args(["--no-equivalent", "--out", o])
            .env("SOURCE_DATE_EPOCH", "1767225600")
            .output()
            .unwrap();
        ok(&got);
        std::fs::read_to_string(&out).unwrap()
    };
    let made = format!("Made by ordo {version} on 2026-01-01T00:00:00Z.");
    let html = run("made.html");
    assert!(html.contains(&format!("<p class=\"meta\" id=\"made\">{made}</p>")), "no date at the top");
    assert_eq!(html.matches(&made).count(), 2, "the date at the top and at the bottom");
    assert!(run("made.md").contains(&format!("_{made}_")), "no date in the Markdown");
    let j: Value = serde_json::from_str(&run("made.json")).unwrap();
    assert_eq!((j["generated_at"].as_str(), j["ordo_version"].as_str()), (Some("2026-01-01T00:00:00Z"), Some(version)));
    // Without SOURCE_DATE_EPOCH: today's date.
    let out = tmp("now.json");
    ok(&ordo(&[
        "report",
        "--quiet",
        "--workload",
        "online",
        "--jobs",
        "200",
        "--no-equivalent",
        "--out",
        out.to_str().unwrap(),
    ]));
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let year: i32 = j["generated_at"].as_str().unwrap()[..4].parse().unwrap();
    assert!(year >= 2025, "{}", j["generated_at"]);
}

/// Issue 30: on a typed cluster the report shows each GPU model's utilisation and the
/// constrained-idle GPU-hours (idle v100s while only a100-only jobs wait), every number keyed
/// to the JSON; an untyped report has neither.
#[test]
fn typed_cluster_report_shows_models_and_constrained_idle() {
    // One a100 node and one v100 node of 8 GPUs. Four a100-only jobs of 8 GPUs, an hour each,
    // all at 0: they run one after another on the a100 node while the v100 node idles with
    // only them waiting (3 hours of 8 GPUs: 24 constrained-idle GPU-hours under any order).
    // Two flexible jobs come after the last has started, when nothing waits.
    let trace = tmp("typed.csv");
    let mut csv = String::from("job_id,submit_time,num_gpu,duration,gpu_model\n");
    for i in 0..4 {
        csv.push_str(&format!("a{i},0,8,3600,a100\n"));
    }
    csv.push_str("f0,12000,4,1800,\nf1,12000,4,1800,\n");
    std::fs::write(&trace, csv).unwrap();
    let out = |name: &str, fmt: &str| {
        let o = tmp(name);
        ok(&ordo(&[
            "report",
            "--trace",
            trace.to_str().unwrap(),
            "--cluster",
            "1x8:a100,1x8:v100",
            "--policies",
            "fifo,sjf",
            "--quiet",
            "--out",
            o.to_str().unwrap(),
            "--out-format",
            fmt,
        ]));
        std::fs::read_to_string(o).unwrap()
    };
    let json: Value = serde_json::from_str(&out("typed.json", "json")).unwrap();
    let html = out("typed.html", "html");
    let md = out("typed.md", "md");
    for p in ["fifo", "sjf"] {
        let m = &json["metrics"][p];
        let c = m["idle_causes"]["constrained_gpu_hours"].as_f64().unwrap();
        assert!((c - 24.0).abs() < 1e-6, "{p}: constrained-idle {c}");
        let models: Vec<&str> =
            m["utilization_by_model"].as_array().unwrap().iter().map(|u| u["model"].as_str().unwrap()).collect();
        assert_eq!(models, ["a100", "v100"], "{p}");
        assert!(json["cost"]["per_policy"][p]["constrained_gpu_hours_per_month"].as_f64().unwrap() > 0.0);
    }
    check_numbers(&html, &json);
    let section = |id: &str| {
        let s = &html[html.find(&format!("<section id=\"{id}\"")).unwrap_or_else(|| panic!("no {id} section"))..];
        s[..s.find("</section>").unwrap()].to_string()
    };
    let models = section("models");
    assert!(models.contains("data-key=\"metrics.fifo.utilization_by_model.0.utilization\""), "{models}");
    assert!(models.contains("data-key=\"metrics.sjf.utilization_by_model.1.utilization\""), "{models}");
    assert!(section("idle").contains("data-key=\"metrics.fifo.idle_causes.constrained_gpu_hours\""));
    assert!(section("cost").contains("data-key=\"cost.per_policy.fifo.constrained_gpu_hours_per_month\""));
    assert!(md.contains("Utilisation by GPU model") && md.contains("constrained-idle GPU-h"), "{md}");
    // Untyped: no models section, no constrained column.
    let plain = tmp("plain.html");
    ok(&ordo(&["report", "--jobs", "50", "--policies", "fifo", "--quiet", "--out", plain.to_str().unwrap()]));
    let plain = std::fs::read_to_string(plain).unwrap();
    assert!(!plain.contains("<section id=\"models\"") && !plain.contains("constrained-idle GPU-h"));
}

/// Issue 31: on a cluster with a network topology the report shows where gangs landed (runs by
/// levels crossed) and the GPU-hours lost to spread placement, per policy and placement
/// (`--placement consolidated,topology`), every number keyed to the JSON's `spread`; the
/// equivalent-GPU search runs under topology placement (added nodes join no unit); a report
/// without a topology has neither section and is the same bytes run after run.
#[test]
fn placement_spread_sections_with_a_topology_and_none_without() {
    let run = |name: &str, args: &[&str]| {
        let out = tmp(name);
        let got = Command::new(env!("CARGO_BIN_EXE_ordo"))
            .args(["report", "--quiet"])
            .args(args)
            .args(["--out", out.to_str().unwrap()])
            .env("SOURCE_DATE_EPOCH", "1767225600")
            .output()
            .unwrap();
        ok(&got);
        std::fs::read_to_string(&out).unwrap()
    };
    let gangs =
        ["--workload", "gangs", "--jobs", "300", "--policies", "fifo,las", "--placement", "consolidated,topology"];
    let html = run("spread.html", &[&gangs[..], &["--no-equivalent"]].concat());
    let json: Value = serde_json::from_str(&run("spread.json", &[&gangs[..], &["--no-equivalent"]].concat())).unwrap();
    let md = run("spread.md", &[&gangs[..], &["--no-equivalent"]].concat());
    let names = ["fifo @consolidated", "fifo @topology", "las @consolidated", "las @topology"];
    assert_eq!(json["policies"], serde_json::json!(names));
    assert_eq!(json["placement"], "consolidated, topology");
    check_numbers(&html, &json);
    let section = |id: &str| {
        let s = &html[html.find(&format!("<section id=\"{id}\"")).unwrap_or_else(|| panic!("no {id} section"))..];
        s[..s.find("</section>").unwrap()].to_string()
    };
    let (landed, lost) = (section("spread"), section("spread-lost"));
    for s in [&landed, &lost] {
        assert_eq!(s.matches("<svg").count(), 1);
        assert!(s.contains("<rect"), "bars drawn");
    }
    for head in ["within one block", "across blocks, within one switch", "across switches"] {
        assert!(landed.contains(&format!("<th>{head}</th>")), "{head}");
        assert!(landed.contains(&format!("\n{head}\n")), "chart category `{head}`");
    }
    let spread = |p: &str| &json["metrics"][p]["spread"];
    let lost_h = |p: &str| spread(p)["lost_gpu_hours"].as_f64().unwrap();
    for p in names {
        let runs: Vec<u64> =
            spread(p)["gang_runs_by_crossed"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(runs.len(), 3, "{p}");
        assert!(runs.iter().sum::<u64>() >= spread(p)["gangs"].as_u64().unwrap() && runs[0] > 0, "{p}: {runs:?}");
        for (c, n) in runs.iter().enumerate() {
            let key = format!("data-key=\"metrics.{p}.spread.gang_runs_by_crossed.{c}\" data-value=\"{n}\"");
            assert!(landed.contains(&key), "{key}");
        }
        assert!(lost.contains(&format!("data-key=\"metrics.{p}.spread.lost_gpu_hours\"")), "{p}");
        assert!(lost_h(p) > 0.0, "{p}");
    }
    // Real figures: placing by the topology keeps more gangs in one block and loses less.
    for o in ["fifo", "las"] {
        let (c, t) = (format!("{o} @consolidated"), format!("{o} @topology"));
        assert!(lost_h(&t) < lost_h(&c), "{o}: {} vs {}", lost_h(&t), lost_h(&c));
        let in_block = |p: &str| spread(p)["gang_runs_by_crossed"][0].as_f64().unwrap();
        let all = |p: &str| {
            spread(p)["gang_runs_by_crossed"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).sum::<f64>()
        };
        assert!(in_block(&t) / all(&t) > in_block(&c) / all(&c), "{o}");
    }
    assert!(md.contains("## Where gangs landed") && md.contains("## GPU-hours lost to spread placement"));
    assert!(md.contains("| policy | gang runs | within one block |"), "{md}");
    // The equivalent-GPU search under topology placement: the topology grows with the nodes.
    let j: Value = serde_json::from_str(&run(
        "spread-eq.json",
        &["--workload", "gangs", "--jobs", "300", "--policies", "fifo,las", "--placement", "topology"],
    ))
    .unwrap();
    assert_eq!(j["equivalent_gpus"]["baseline"], "fifo");
    assert!(!j["equivalent_gpus"]["probes"].as_array().unwrap().is_empty(), "{}", j["equivalent_gpus"]);

    // Without a topology: no spread section, no spread figure, and the same page each time.
    let plain = ["--workload", "online", "--jobs", "200", "--policies", "fifo,sgf", "--no-equivalent"];
    let a = run("plain-a.html", &plain);
    assert_eq!(a, run("plain-b.html", &plain), "the report is deterministic");
    assert!(!a.contains("<section id=\"spread") && !a.contains("Where gangs landed"));
    let j: Value = serde_json::from_str(&run("plain.json", &plain)).unwrap();
    assert!(j["metrics"]["fifo"].get("spread").is_none());

    // Laid out at 1,400 px in Chromium, the spread tables and charts fit.
    let chromium = Path::new("/usr/bin/chromium");
    if !chromium.is_file() {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI must have Chromium (.ci/run installs it)");
        let _ = writeln!(std::io::stderr(), "skipped: /usr/bin/chromium not found (apt-get install chromium)");
        return;
    }
    let page = tmp("spread-layout.html");
    let (dom, result) = laid_out(chromium, &page, &html);
    assert!(dom.contains("<section id=\"spread\"") && dom.contains("<section id=\"spread-lost\""));
    assert!(result.contains("problems: 0\n"), "{result}");
}
