//! `KvLayout`: how layers are grouped onto pool pages (docs/kv.md, "What is built").

use tl_core::{KvError, KvGeometry, KvLayout};

/// Layer `i` global iff `(i + 1).is_multiple_of(6)`, the rest windowed at `w` (Gemma 3).
fn gemma3(layers: usize, w: usize) -> Vec<Option<usize>> {
    (0..layers).map(|i| if (i + 1).is_multiple_of(6) { None } else { Some(w) }).collect()
}

#[test]
fn gemma3_270m_groups_three_layers_a_page() {
    let l = KvLayout::from_windows(&gemma3(18, 512)).unwrap();
    assert_eq!((l.n_groups(), l.group_layers(), l.n_layers()), (6, 3, 18));
    let groups: Vec<(Vec<u32>, Option<usize>)> = l.groups().iter().map(|g| (g.layers.clone(), g.window)).collect();
    assert_eq!(
        groups,
        vec![
            (vec![0, 1, 2], Some(512)),
            (vec![3, 4, 6], Some(512)),
            (vec![5, 11, 17], None),
            (vec![7, 8, 9], Some(512)),
            (vec![10, 12, 13], Some(512)),
            (vec![14, 15, 16], Some(512)),
        ]
    );
    assert_eq!(l.slot(11), Some((2, 1)));
    assert_eq!(l.slot(6), Some((1, 2)));
    assert_eq!(l.slot(18), None);
    assert!(l.windowed());
    let g = KvGeometry { n_layers: 18, n_kv_heads: 1, head_dim: 256, block_tokens: 16 };
    assert_eq!(l.page_geometry(g), KvGeometry { n_layers: 3, ..g });
    // 8,192 tokens: 512 global pages, 32 per windowed group (positions 7,680..8,191).
    assert_eq!(l.pages_for(8192, 16), 512 + 5 * 32);
    // 8,200: the window spans 33 blocks.
    assert_eq!(l.pages_for(8200, 16), 513 + 5 * 33);
    assert_eq!(l.pages_for(100, 16), 6 * 7);
    // Steps of 512 queries span 1,023 positions of a windowed layer: at most 65 blocks.
    assert_eq!(l.peak_pages(8192, 512, 16), 512 + 5 * 65);
    assert_eq!(l.peak_pages(100, 512, 16), 6 * 7);
}

#[test]
fn other_shapes_group_by_the_greatest_common_divisor() {
    // Gemma 3 1B: 26 layers, 4 global: groups of 2.
    let l = KvLayout::from_windows(&gemma3(26, 512)).unwrap();
    assert_eq!((l.n_groups(), l.group_layers()), (13, 2));
    // gpt-oss: alternating windowed and global.
    let alt: Vec<Option<usize>> = (0..24).map(|i| (i % 2 == 0).then_some(128)).collect();
    let l = KvLayout::from_windows(&alt).unwrap();
    assert_eq!((l.n_groups(), l.group_layers()), (2, 12));
    assert_eq!(l.groups()[0].layers, (0..24).step_by(2).collect::<Vec<u32>>());
    // Mistral: one window for every layer, one group.
    let l = KvLayout::from_windows(&[Some(4096); 32]).unwrap();
    assert_eq!((l.n_groups(), l.group_layers(), l.windowed()), (1, 32, true));
    // No windows: one group of every layer, a page is a whole block.
    let l = KvLayout::uniform(30);
    assert_eq!((l.n_groups(), l.group_layers(), l.windowed()), (1, 30, false));
    assert_eq!(l.pages_for(100, 16), 7);
    assert_eq!(l.peak_pages(100, 8, 16), 7);
    assert_eq!(l.first_live_row(0, 10_000, 16), 0);
}

#[test]
fn the_first_live_row_is_the_block_of_the_oldest_visible_key() {
    let l = KvLayout::from_windows(&[Some(8), None]).unwrap();
    // A query at 11 sees 4..=11: block 1 of 4 positions on.
    assert_eq!(l.first_live_row(0, 11, 4), 1);
    assert_eq!(l.first_live_row(0, 12, 4), 1);
    assert_eq!(l.first_live_row(0, 15, 4), 2);
    assert_eq!(l.first_live_row(0, 3, 4), 0);
    assert_eq!(l.first_live_row(1, 15, 4), 0);
}

#[test]
fn bad_windows_are_refused() {
    assert!(matches!(KvLayout::from_windows(&[]), Err(KvError::ZeroCapacity { .. })));
    assert!(matches!(KvLayout::from_windows(&[Some(0), None]), Err(KvError::ZeroCapacity { .. })));
}

/// Gemma 4's shared KV: the last layers read the last owning layer of their kind and own
/// no slab, so the pages hold the owning layers only.
#[test]
fn shared_kv_layers_take_their_sources_slot_and_no_slab() {
    // 6 layers [s, s, f, s, s, f]; 4 reads 3, 5 reads 2.
    let w = vec![Some(8), Some(8), None, Some(8), Some(8), None];
    let shared = [None, None, None, None, Some(3), Some(2)];
    let l = KvLayout::with_shared(&w, &[], &shared).unwrap();
    let groups: Vec<(Vec<u32>, Option<usize>)> = l.groups().iter().map(|g| (g.layers.clone(), g.window)).collect();
    // Owning kinds: 3 windowed, 1 global: g = 1, four groups of one layer.
    assert_eq!(groups, vec![(vec![0], Some(8)), (vec![1], Some(8)), (vec![2], None), (vec![3], Some(8))]);
    assert_eq!((l.n_layers(), l.owning_layers(), l.group_layers()), (6, 4, 1));
    assert_eq!(l.slot(4), l.slot(3));
    assert_eq!(l.slot(5), l.slot(2));
    let g = KvGeometry { n_layers: 6, n_kv_heads: 2, head_dim: 32, block_tokens: 16 };
    assert_eq!(l.page_geometry(g), KvGeometry { n_layers: 1, ..g });
    // Without sharing: 4 windowed and 2 global layers, three groups of 2 (six slabs a row
    // against four).
    assert_eq!(KvLayout::with_shared(&w, &[], &[]).unwrap(), KvLayout::from_windows(&w).unwrap());
    let own = KvLayout::from_windows(&w).unwrap();
    assert_eq!((own.n_groups(), own.group_layers()), (3, 2));
    // Refused: a later source, a sharing source, another window, a wrong length.
    for bad in [
        vec![None, None, None, None, Some(5), None],
        vec![None, None, None, Some(1), Some(3), None],
        vec![None, None, None, None, Some(2), None],
        vec![None, Some(0)],
    ] {
        assert!(KvLayout::with_shared(&w, &[], &bad).is_err(), "{bad:?}");
    }
}
