//! Reading speed: `philly_rfold.csv` (target under 150 ms) and a 200,000-job SWF log built from
//! `lublin_256.swf` repeated (target under 400 ms), both streamed from disk.
//!
//! `cargo bench -p ordo-trace --bench read`. Needs the shared traces (`$ORDO_TRACES`, default
//! `../shared/traces`); without them it says `skipped: ...` and measures nothing.

use criterion::{criterion_group, criterion_main, Criterion};
use ordo_trace::{load_path, LoadOptions};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn traces() -> Option<PathBuf> {
    let dir = match std::env::var_os("ORDO_TRACES") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces"),
    };
    if dir.join("philly/philly_rfold.csv").is_file() && dir.join("swf/lublin_256.swf").is_file() {
        Some(dir)
    } else {
        eprintln!("skipped: traces not found at {} (set ORDO_TRACES)", dir.display());
        None
    }
}

/// Writes `copies` back-to-back copies of an SWF log's jobs (renumbered, each copy shifted
/// after the previous one's last submit) to `out`; returns the number of jobs written.
fn repeat_swf(src: &Path, copies: usize, out: &Path) -> usize {
    let lines: Vec<String> = std::io::BufReader::new(std::fs::File::open(src).expect("open SWF"))
        .lines()
        .map(|l| l.expect("read SWF"))
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with(';'))
        .collect();
    let span: i64 = lines.iter().filter_map(|l| l.split_whitespace().nth(1)?.parse().ok()).max().unwrap_or(0) + 1;
    let mut w = std::io::BufWriter::new(std::fs::File::create(out).expect("create SWF"));
    writeln!(w, "; MaxProcs: 256").expect("write");
    let mut n = 0;
    for c in 0..copies {
        for l in &lines {
            let mut f: Vec<String> = l.split_whitespace().map(str::to_string).collect();
            n += 1;
            f[0] = n.to_string();
            let submit: i64 = f[1].parse().expect("submit");
            f[1] = (submit + c as i64 * span).to_string();
            writeln!(w, "{}", f.join(" ")).expect("write");
        }
    }
    w.flush().expect("flush");
    n
}

fn bench(c: &mut Criterion) {
    let Some(dir) = traces() else { return };
    let philly = dir.join("philly/philly_rfold.csv");
    let mut g = c.benchmark_group("read");
    g.sample_size(20).measurement_time(Duration::from_secs(8));
    g.bench_function("philly_rfold.csv (111,549 rows)", |b| {
        b.iter(|| {
            let t = load_path(&philly, &LoadOptions::default()).expect("load philly");
            assert_eq!(t.rows, 111_549);
            t.workload.jobs.len()
        })
    });
    let swf = std::env::temp_dir().join(format!("ordo-bench-200k-{}.swf", std::process::id()));
    let n = repeat_swf(&dir.join("swf/lublin_256.swf"), 20, &swf);
    assert_eq!(n, 200_000);
    g.bench_function("swf 200,000 jobs (lublin_256 x 20)", |b| {
        b.iter(|| {
            let t = load_path(&swf, &LoadOptions::default()).expect("load swf");
            assert_eq!(t.rows, 200_000);
            t.workload.jobs.len()
        })
    });
    g.finish();
    let _ = std::fs::remove_file(&swf);
}

criterion_group!(benches, bench);
criterion_main!(benches);
