//! Runs every scenario at full size and prints the markdown table for docs/limiter.md.
//! `simulate [seed] [scale]` (default seed 17; `scale` < 1 shrinks every scenario's locations,
//! traffic and limit by that factor, for a quick look).

use edge_sim::metrics::Report;
use edge_sim::scenarios;
use edge_sim::world::World;

fn main() {
    let mut args = std::env::args().skip(1);
    let seed = args.next().map_or(17, |s| s.parse().expect("the seed is a number"));
    let scale: f64 = args.next().map_or(1.0, |s| s.parse().expect("the scale is a number"));
    let only = args.next();
    println!("{}", Report::HEADER);
    for config in scenarios::full(seed) {
        if only.as_deref().is_some_and(|o| !config.name.starts_with(o)) {
            continue;
        }
        let config = if scale < 1.0 {
            let locations = ((config.locations as f64 * scale) as usize).max(2);
            let keep = config.limits.rpm.is_some_and(|r| r < 10_000);
            scenarios::shrink(config.clone(), locations, config.duration_s, keep)
        } else {
            config
        };
        let started = std::time::Instant::now();
        let (report, mut world) = World::new(config).run();
        println!("{}", report.row());
        let now = world.now_ms();
        let status = world.object().status(now);
        eprintln!(
            "{}: {:.1} s; object calls {:?}; leases {:?}",
            report.name,
            started.elapsed().as_secs_f64(),
            status.calls,
            status.leases.counts
        );
        if world.config_relays() {
            eprintln!("relays: {:?}", world.relay_counts());
        }
        if std::env::var_os("SIM_SECONDS").is_some() {
            eprintln!("calls per second: {:?}", world.recorder.calls_per_s);
        }
    }
}
