//! A corrupted checkpoint for the NaN-logit tests of tl-examples and tl-serve (both
//! include this file by path): the final norm's BF16 weights of a safetensors file
//! overwritten with NaN, so every logit is NaN.

use std::path::Path;

/// Overwrite `model.norm.weight` (BF16) in the safetensors file at `path` with NaN.
pub fn nan_final_norm(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let off = &header["model.norm.weight"]["data_offsets"];
    let (b, e) = (off[0].as_u64().expect("begin") as usize, off[1].as_u64().expect("end") as usize);
    for c in bytes[8 + n + b..8 + n + e].chunks_exact_mut(2) {
        c.copy_from_slice(&0x7FC0u16.to_le_bytes()); // BF16 NaN
    }
    std::fs::write(path, &bytes).expect("write");
}
