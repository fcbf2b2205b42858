//! tl-core's envelope reader and writer on their own (docs/formats/kv-block.md): what the
//! writer lays out is what the reader gives back, field for field; the self-described
//! reader the P/D hand-off and the disk cache use refuses what it cannot lay out (an unknown
//! dtype, a zero geometry field) naming it, besides every rule the pool's import checks;
//! `first(n)` cuts an envelope to a valid one of its first records.

use tl_core::envelope::{slab_bytes, Envelope, EnvelopeWriter, HEADER_BYTES, TRAILER_BYTES};
use tl_core::{KvElem, KvError, KvGeometry};

const G: KvGeometry = KvGeometry { n_layers: 2, n_kv_heads: 2, head_dim: 4, block_tokens: 3 };

/// An envelope of three records (fills 3, 3, 1; hashes on the full ones), slab bytes
/// counting up from the record's index.
fn three(elem: KvElem) -> Vec<u8> {
    let per = slab_bytes(G, elem).unwrap();
    let mut w = EnvelopeWriter::new(elem, G, 3).unwrap();
    for (i, (fill, hash)) in [(3, Some(0xfeed)), (3, Some(0xbeef)), (1, None)].into_iter().enumerate() {
        let out = w.record(fill, hash);
        // q8 codes must stay in -127..=127: bytes below 0x80.
        out.extend((0..per * 2 * G.n_layers as usize).map(|b| ((b + i) % 100) as u8));
    }
    w.finish().unwrap()
}

fn refused(buf: &[u8]) -> String {
    match Envelope::read(buf) {
        Err(KvError::BadEnvelope { reason }) => reason,
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn what_the_writer_lays_out_the_reader_gives_back() {
    for elem in [KvElem::F16, KvElem::Q8] {
        let buf = three(elem);
        let env = Envelope::read(&buf).unwrap();
        let h = env.header();
        assert_eq!((h.elem, h.geometry, h.n_blocks, h.version), (elem, G, 3, elem.code()));
        let recs: Vec<_> = env.records().map(|r| (r.fill, r.hash, r.slabs[0])).collect();
        assert_eq!(recs, vec![(3, Some(0xfeed), 0), (3, Some(0xbeef), 1), (1, None, 2)]);
        // The pool's reader agrees, and refuses another geometry or element type.
        assert!(Envelope::parse(&buf, elem, G).is_ok());
        assert!(Envelope::parse(&buf, elem, KvGeometry { head_dim: 8, ..G }).is_err());
        let other = if elem == KvElem::F16 { KvElem::Q8 } else { KvElem::F16 };
        assert!(Envelope::parse(&buf, other, G).is_err());
    }
}

#[test]
fn the_self_described_reader_refuses_what_it_cannot_lay_out() {
    let buf = three(KvElem::F16);
    let mut bad = buf.clone();
    bad[12..16].copy_from_slice(&7u32.to_le_bytes()); // dtype
    assert!(refused(&bad).contains("unknown dtype 7"), "{}", refused(&bad));
    let mut bad = buf.clone();
    bad[24..28].copy_from_slice(&0u32.to_le_bytes()); // head_dim
    assert!(refused(&bad).contains("has a zero"), "{}", refused(&bad));
    let mut bad = buf.clone();
    let n = bad.len();
    bad[n - 1] ^= 1; // the checksum
    assert!(refused(&bad).contains("checksum"), "{}", refused(&bad));
    assert!(refused(&buf[..buf.len() - 1]).contains("truncated"));
    assert!(refused(&buf[..HEADER_BYTES + TRAILER_BYTES - 1]).contains("truncated"));
}

#[test]
fn first_cuts_to_a_valid_envelope_of_the_leading_records() {
    let buf = three(KvElem::Q8);
    let env = Envelope::read(&buf).unwrap();
    for n in 0..=3 {
        let cut = env.first(n).unwrap();
        let e = Envelope::read(&cut).unwrap_or_else(|e| panic!("first({n}): {e}"));
        assert_eq!(e.header().n_blocks, n);
        for (a, b) in e.records().zip(env.records()) {
            assert_eq!((a.fill, a.hash, a.slabs), (b.fill, b.hash, b.slabs));
        }
    }
}

#[test]
fn the_writer_refuses_records_of_the_wrong_count_or_size() {
    let mut w = EnvelopeWriter::new(KvElem::F16, G, 2).unwrap();
    w.record(3, None).extend([0u8; 4]);
    assert!(w.finish().is_err(), "one short record of two announced was accepted");
}
