//! The worker team: every task of a region runs exactly once, results are whatever
//! thread ran them, regions follow each other without mixing, a nested region runs in
//! line, a panicking task is reported to the caller, and without a team the same calls
//! run on rayon.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use tl_quant::team::{parallel, parallel_chunks, threads, Team};

#[test]
fn every_task_runs_once_in_each_of_many_regions() {
    let team = Team::new(3);
    assert_eq!(team.threads(), 3);
    team.enter(|| {
        assert_eq!(threads(), 3);
        for round in 0..20_000usize {
            let n = 1 + round % 37;
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            parallel(n, |t| {
                hits[t].fetch_add(round + 1, Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Relaxed) == round + 1), "round {round}");
        }
    });
}

#[test]
fn chunks_are_disjoint_and_cover_the_slice() {
    let team = Team::new(2);
    let mut v = vec![0u32; 1001];
    team.enter(|| parallel_chunks(&mut v, 64, |i, piece| piece.iter_mut().for_each(|x| *x += i as u32 + 1)));
    for (j, &x) in v.iter().enumerate() {
        assert_eq!(x, j as u32 / 64 + 1, "element {j}");
    }
    // The same on rayon, without a team.
    let mut w = vec![0u32; 1001];
    parallel_chunks(&mut w, 64, |i, piece| piece.iter_mut().for_each(|x| *x += i as u32 + 1));
    assert_eq!(v, w);
}

#[test]
fn a_region_inside_a_task_runs_in_line() {
    let team = Team::new(2);
    let total = AtomicUsize::new(0);
    team.enter(|| {
        parallel(4, |_| parallel(5, |_| _ = total.fetch_add(1, Relaxed)));
    });
    assert_eq!(total.load(Relaxed), 20);
}

#[test]
fn a_panicking_task_panics_the_caller_and_the_team_goes_on() {
    let team = Team::new(2);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        team.enter(|| parallel(8, |t| assert!(t != 5, "task 5")));
    }));
    assert!(r.is_err());
    let n = AtomicUsize::new(0);
    team.enter(|| parallel(8, |_| _ = n.fetch_add(1, Relaxed)));
    assert_eq!(n.load(Relaxed), 8);
}

#[test]
fn workers_that_slept_wake_for_the_next_region() {
    let team = Team::new(2);
    for _ in 0..3 {
        std::thread::sleep(tl_quant::team::SPIN * 5);
        let n = AtomicUsize::new(0);
        team.enter(|| parallel(16, |_| _ = n.fetch_add(1, Relaxed)));
        assert_eq!(n.load(Relaxed), 16);
    }
}
