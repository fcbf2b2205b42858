//! Byte edits of a GGUF file, for tests of what a bad file gets.

/// `bytes` (a GGUF file) with the `u32` value of metadata key `key` set to `v`.
pub fn gguf_with_u32_meta(mut bytes: Vec<u8>, key: &str, v: u32) -> Vec<u8> {
    let mut k = (key.len() as u64).to_le_bytes().to_vec();
    k.extend_from_slice(key.as_bytes());
    let at = bytes.windows(k.len()).position(|w| w == k).expect("metadata key") + k.len();
    assert_eq!(bytes[at..at + 4], 4u32.to_le_bytes(), "{key} is a u32 (GGUF type 4)");
    bytes[at + 4..at + 8].copy_from_slice(&v.to_le_bytes());
    bytes
}

/// `bytes` (a GGUF file) with the string `from` (a key or tensor name, found with its
/// length prefix, so not as a prefix of a longer name) respelled `to`, of the same length:
/// a file that lacks `from`.
pub fn gguf_respelled(mut bytes: Vec<u8>, from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut k = (from.len() as u64).to_le_bytes().to_vec();
    k.extend_from_slice(from.as_bytes());
    let at = bytes.windows(k.len()).position(|w| w == k).expect(from) + 8;
    bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
    bytes
}

/// The error loading `bytes` as a GGUF file (a panic if it loads).
pub fn gguf_error(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.gguf");
    std::fs::write(&path, bytes).expect("write");
    crate::load_error(&path)
}
