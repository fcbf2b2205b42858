//! Mistral's window on every layer makes one windowed group (docs/kv.md): a sequence
//! gives back each block once it is out of every later query's window, holding about
//! the window, and its logits keep the bits of a run that keeps every block.

use tl_arch_mistral as _;
use tl_core::{ForwardBatch, Weights};
use tl_testkit::{alloc, argmax, bits, load_path, release};

const WINDOW: usize = 16;

fn fixture() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-mistral")
}

#[test]
fn giving_blocks_back_past_the_window_changes_no_bit() {
    let mut r = load_path(&fixture(), 2, Weights::Native);
    let layout = r.kv_layout().clone();
    assert_eq!((layout.n_groups(), layout.groups()[0].window), (1, Some(WINDOW)), "{layout:?}");
    let b = r.block_tokens();
    let prompt: Vec<u32> = (0..70).map(|i| (i * 37 + 5) % 250).collect();
    let steps = 10;

    // Every block kept.
    let full = alloc(&r, prompt.len() + steps);
    let mut want = vec![r.forward(&ForwardBatch::single(&prompt, 0, &full)).unwrap().data];
    let mut fed = Vec::new();
    for k in 0..steps {
        let t = argmax(want.last().unwrap());
        fed.push(t);
        want.push(r.forward(&ForwardBatch::single(&[t], prompt.len() + k, &full)).unwrap().data);
    }
    release(&r, &full);

    // Given back as the window passes.
    let mut seq = r.sequence();
    let mut got = vec![r.feed(&mut seq, &prompt).unwrap()];
    for &t in &fed {
        got.push(r.feed(&mut seq, &[t]).unwrap());
        // The blocks of the last WINDOW positions (and the one being filled), no more.
        let held = r.pool().lock().unwrap().n_in_use();
        assert!(held <= WINDOW.div_ceil(b) + 1, "{held} blocks held for a window of {WINDOW}");
    }
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(bits(w), bits(g), "step {i}: the logits changed once blocks went back");
    }
}
