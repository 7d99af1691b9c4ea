//! Unit tests of the per-category statistics: bytes moving between categories, and the
//! category mix at the moment of the peak.

use crate::backing::VirtualBacking;
use crate::caching::*;

#[test]
fn categories_move_bytes_and_add_up_to_the_allocated_bytes() {
    let a = CachingAllocator::new(VirtualBacking::new(1 << 32));
    let site = Site::unknown("test");
    let w = a.allocate(3 << 20, &site).unwrap();
    a.set_category(&w, Category::Parameter);
    // A request freed and repeated takes the allocator's fast path; it stays a temporary.
    for _ in 0..3 {
        let t = a.allocate(1000, &site).unwrap();
        // SAFETY: `t` came from `a` and is not used again.
        unsafe { a.deallocate(t) };
    }
    let g = a.allocate(3 << 20, &site).unwrap();
    a.set_category(&g, Category::Gradient);
    a.set_category(&g, Category::Gradient);
    let stats = a.memory_stats();
    let c = |cat| *stats.category_bytes.get(cat);
    assert_eq!(c(Category::Parameter).current, 3 << 20);
    assert_eq!(c(Category::Gradient).current, 3 << 20);
    assert_eq!(c(Category::Temporary).current, 0);
    assert_eq!(c(Category::Temporary).peak, 3 << 20);
    let total: i64 = Category::ALL.iter().map(|&k| c(k).current).sum();
    assert_eq!(total, stats.allocated_bytes.all.current);
    let map = a.memory_stats_map();
    assert_eq!(map["category_bytes.parameter.current"], 3 << 20);
    assert_eq!(map["category_bytes.optimizer_state.peak"], 0);
    a.check_consistency().unwrap();
    let by_category = a.live_allocations_by(Grouping::Category);
    let keys: Vec<(&str, usize, usize)> = by_category
        .iter()
        .map(|g| (g.key.as_str(), g.bytes, g.count))
        .collect();
    assert_eq!(keys, [("gradient", 3 << 20, 1), ("parameter", 3 << 20, 1)]);
    // SAFETY: both came from `a` and are not used again.
    unsafe {
        a.deallocate(w);
        a.deallocate(g);
    }
    let stats = a.memory_stats();
    assert_eq!(stats.category_bytes.get(Category::Parameter).current, 0);
    assert_eq!(stats.category_bytes.get(Category::Parameter).peak, 3 << 20);
    a.check_consistency().unwrap();
}

#[test]
fn the_peak_mix_is_the_categories_at_the_moment_of_the_peak() {
    let a = CachingAllocator::new(VirtualBacking::new(1 << 32));
    let site = Site::unknown("test");
    let w = a.allocate(4 << 20, &site).unwrap();
    a.set_category(&w, Category::Parameter);
    // The peak: the parameter and an activation marked after it was allocated.
    let act = a.allocate(2 << 20, &site).unwrap();
    a.set_category(&act, Category::Activation);
    // SAFETY: `act` came from `a` and is not used again.
    unsafe { a.deallocate(act) };
    // Smaller than the peak: gradients that never coexist with the activation.
    let g = a.allocate(1 << 20, &site).unwrap();
    a.set_category(&g, Category::Gradient);
    // Requests freed at once take the fast path and stay below the peak.
    for _ in 0..3 {
        let t = a.allocate(1000, &site).unwrap();
        // SAFETY: `t` came from `a` and is not used again.
        unsafe { a.deallocate(t) };
    }
    let stats = a.memory_stats();
    let mix = stats.category_bytes_at_peak;
    assert_eq!(stats.allocated_bytes.all.peak, 6 << 20);
    assert_eq!(mix.get(Category::Parameter), 4 << 20);
    assert_eq!(mix.get(Category::Activation), 2 << 20);
    assert_eq!(mix.get(Category::Gradient), 0);
    assert_eq!(mix.get(Category::Temporary), 0);
    // Each category's own peak is another thing: the gradient's is 1 MiB.
    assert_eq!(stats.category_bytes.get(Category::Gradient).peak, 1 << 20);
    // A temporary on the fast path that sets a new peak is in the mix.
    let big = 3 << 20;
    for _ in 0..2 {
        let t = a.allocate(big, &site).unwrap();
        // SAFETY: `t` came from `a` and is not used again.
        unsafe { a.deallocate(t) };
    }
    let stats = a.memory_stats();
    let mix = stats.category_bytes_at_peak;
    let total: i64 = Category::ALL.iter().map(|&c| mix.get(c)).sum();
    assert_eq!(total, stats.allocated_bytes.all.peak);
    assert_eq!(mix.get(Category::Gradient), 1 << 20);
    assert_eq!(mix.get(Category::Temporary), big as i64);
    // Resetting the peak takes the mix as it stands.
    a.reset_peak_memory_stats();
    let mix = a.memory_stats().category_bytes_at_peak;
    assert_eq!(mix.get(Category::Activation), 0);
    assert_eq!(mix.get(Category::Parameter), 4 << 20);
    // SAFETY: both came from `a` and are not used again.
    unsafe {
        a.deallocate(w);
        a.deallocate(g);
    }
}

#[test]
fn a_block_allocated_as_a_category_never_counts_as_a_temporary() {
    let a = CachingAllocator::new(VirtualBacking::new(1 << 32));
    let site = Site::unknown("test");
    // Both paths: a fresh segment, then the fast path of a request freed and repeated.
    for _ in 0..3 {
        let b = a.allocate_as(1 << 20, &site, Category::Input).unwrap();
        let stats = a.memory_stats();
        assert_eq!(stats.category_bytes.get(Category::Input).current, 1 << 20);
        assert_eq!(stats.category_bytes.get(Category::Temporary).peak, 0);
        let at_peak = stats.categories_at_peak_with(&MemoryStats::default());
        assert_eq!((at_peak["input"], at_peak["temporary"]), (1 << 20, 0));
        // SAFETY: `b` came from `a` and is not used again.
        unsafe { a.deallocate(b) };
    }
    // Zero bytes are still free of any statistic.
    let empty = a.allocate_as(0, &site, Category::Input).unwrap();
    assert_eq!(
        a.memory_stats().category_bytes.get(Category::Input).current,
        0
    );
    // SAFETY: `empty` came from `a`.
    unsafe { a.deallocate(empty) };
    a.check_consistency().unwrap();
}
