//! Playground benchmark: wall time of `Playground::up` until its 3-member Etcd is Ready (real etcd
//! processes), and of `Playground::down`, against an anchor measured in the same run: starting a bare
//! 3-member etcd cluster with `LocalCluster::start` (all members serving, a leader elected). The figure
//! to quote is the ratio playground-ready / anchor, which carries across machines better than seconds.
//!
//! `cargo bench --bench playground --profile dev`. Rounds with `BENCH_ROUNDS` (default 5). Anchor and
//! playground alternate within each round so that machine load affects both alike. Nothing is asserted.

use std::time::{Duration, Instant};

use landscape::etcd::{EtcdBinary, LocalCluster, LocalClusterOptions};
use landscape::{Playground, PlaygroundOptions};

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(run());
}

fn stats(name: &str, samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    let (min, med, max) = (samples[0], samples[samples.len() / 2], samples[samples.len() - 1]);
    println!(
        "{name:<34} min {:>7.3}s  median {:>7.3}s  max {:>7.3}s  (n={})",
        min.as_secs_f64(),
        med.as_secs_f64(),
        max.as_secs_f64(),
        samples.len()
    );
    med
}

async fn run() {
    let Some(binary) = EtcdBinary::find() else {
        eprintln!(
            "playground bench: no etcd binary found (install etcd-server or set DRUIDCTL_ETCD_BIN); nothing measured"
        );
        return;
    };
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5).max(1);
    let (mut anchor, mut anchor_stop, mut up, mut ready, mut down) = (vec![], vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        let tmp = tempfile::tempdir().unwrap();

        let t = Instant::now();
        let cluster = LocalCluster::start(&binary, &tmp.path().join("anchor"), 3, LocalClusterOptions::default())
            .await
            .expect("bare 3-member etcd cluster");
        anchor.push(t.elapsed());
        let t = Instant::now();
        drop(cluster);
        anchor_stop.push(t.elapsed());

        let t = Instant::now();
        let pg = Playground::up(PlaygroundOptions::new(tmp.path().join("playground"))).await.expect("playground up");
        up.push(t.elapsed());
        pg.wait_ready(Duration::from_secs(90)).await.expect("3-member Etcd ready");
        ready.push(t.elapsed());
        let t = Instant::now();
        pg.down().await.expect("playground down");
        down.push(t.elapsed());
        eprintln!(
            "round {}: anchor {:.3}s, playground ready {:.3}s, down {:.3}s",
            round + 1,
            anchor[round].as_secs_f64(),
            ready[round].as_secs_f64(),
            down[round].as_secs_f64()
        );
    }
    println!("playground benchmark, {rounds} rounds, real etcd {}", binary.etcd.display());
    let a = stats("anchor: bare 3-member etcd start", &mut anchor);
    stats("anchor: bare cluster kill", &mut anchor_stop);
    stats("playground: up() returns", &mut up);
    let r = stats("playground: up() to Etcd Ready", &mut ready);
    stats("playground: down()", &mut down);
    println!("ratio playground-ready / anchor (medians): {:.2}x", r.as_secs_f64() / a.as_secs_f64());
}
