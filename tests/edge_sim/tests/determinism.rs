//! A run is a function of its config: the same seed gives the same table row.

use edge_sim::scenarios;
use edge_sim::world::World;

#[test]
fn the_same_seed_gives_the_same_run() {
    let small = || scenarios::shrink(scenarios::burst(5), 6, 40, false);
    let (a, _) = World::new(small()).run();
    let (b, _) = World::new(small()).run();
    assert_eq!(a.row(), b.row());
    assert!(a.requests > 1_000, "{}", a.row());
    let (other, _) = World::new(scenarios::shrink(scenarios::burst(6), 6, 40, false)).run();
    assert_ne!(a.requests, other.requests, "another seed, another run");
}
