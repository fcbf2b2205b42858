//! The safetensors reader's rules (model-dir.md), on files built byte by byte here.

use std::path::PathBuf;

use tl_core::{DType, SafeTensors, WeightError, WeightStore};

/// Write `header` (JSON text) and `data` as a safetensors file; return its path.
fn file(dir: &tempfile::TempDir, name: &str, header: &str, data: &[u8]) -> PathBuf {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn refused(path: &std::path::Path) -> String {
    match SafeTensors::open(path) {
        Ok(_) => panic!("{} was accepted", path.display()),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(&path.display().to_string()), "message does not name the file: {msg}");
            msg
        }
    }
}

#[test]
fn safetensors_reader_rules() {
    let dir = tempfile::tempdir().unwrap();

    // Offsets count from the DATA BUFFER: "b" starts at data offset 4, i.e. file offset
    // 8 + N + 4. Reading from the file start would give header bytes (mutant s11).
    let header = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    let mut data = 1.5f32.to_le_bytes().to_vec();
    data.extend(2.25f32.to_le_bytes());
    data.extend((-3.0f32).to_le_bytes());
    let p = file(&dir, "ok.safetensors", header, &data);
    let st = SafeTensors::open(&p).unwrap();
    assert_eq!(st.f32("a", &[1]).unwrap(), vec![1.5]);
    assert_eq!(st.f32("b", &[2]).unwrap(), vec![2.25, -3.0]);
    assert_eq!(st.names(), vec!["a".to_string(), "b".to_string()]);

    // F16 and BF16 widening, exact: f16 0x3C01 = 1 + 2^-10, f16 0x0001 = 2^-24 (subnormal),
    // bf16 0x3F81 = 1 + 2^-7. Reading BF16 as F16 (mutant s12) gives other values.
    let header = r#"{"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"g":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}}"#;
    let data = [0x01, 0x3C, 0x01, 0x00, 0x81, 0x3F, 0x80, 0xC0];
    let p = file(&dir, "half.safetensors", header, &data);
    let st = SafeTensors::open(&p).unwrap();
    let h = st.f32("h", &[2]).unwrap();
    assert_eq!(h[0].to_bits(), (1.0f32 + 2f32.powi(-10)).to_bits());
    assert_eq!(h[1].to_bits(), 2f32.powi(-24).to_bits());
    let g = st.f32("g", &[2]).unwrap();
    assert_eq!(g[0].to_bits(), (1.0f32 + 2f32.powi(-7)).to_bits());
    assert_eq!(g[1].to_bits(), (-4.0f32).to_bits());

    // A shape that disagrees with what the caller expects names the tensor and both shapes.
    match st.f32("h", &[3]) {
        Err(WeightError::Shape { name, expected, actual, .. }) => {
            assert_eq!((name.as_str(), expected, actual), ("h", vec![3], vec![2]));
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    assert!(matches!(st.f32("nope", &[1]), Err(WeightError::Missing { .. })));
    // Raw bytes are typed: U8 asked of an F16 tensor is refused.
    assert!(matches!(st.raw("h", DType::U8, &[2]), Err(WeightError::DType { .. })));
    assert_eq!(st.raw("h", DType::F16, &[2]).unwrap(), &data[..4]);

    // __metadata__ is exposed and is not a tensor.
    let header = r#"{"__metadata__":{"quant":"int4-g32-sym"},"q":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#;
    let p = file(&dir, "meta.safetensors", header, &[0x78, 0xF1]);
    let st = SafeTensors::open(&p).unwrap();
    assert_eq!(st.metadata("quant").as_deref(), Some("int4-g32-sym"));
    assert_eq!(st.names(), vec!["q".to_string()]);

    // Each refusal is an Err naming the file (and the tensor where there is one).
    let two = |a: &str, b: &str| {
        format!(
            r#"{{"a":{{"dtype":"F32","shape":[1],"data_offsets":{a}}},"b":{{"dtype":"F32","shape":[1],"data_offsets":{b}}}}}"#
        )
    };
    let eight = [0u8; 8];
    // A gap between tensors.
    let msg = refused(&file(&dir, "gap.safetensors", &two("[0,4]", "[8,12]"), &[0u8; 12]));
    assert!(msg.contains("\"b\""), "{msg}");
    // Overlapping tensors.
    let msg = refused(&file(&dir, "overlap.safetensors", &two("[0,4]", "[2,6]"), &[0u8; 6]));
    assert!(msg.contains("\"b\""), "{msg}");
    // Trailing bytes after the last tensor.
    refused(&file(&dir, "trailing.safetensors", &two("[0,4]", "[4,8]"), &[0u8; 9]));
    // A truncated data buffer.
    refused(&file(&dir, "truncated.safetensors", &two("[0,4]", "[4,8]"), &eight[..7]));
    // A range whose size is not elements * dtype size names the tensor.
    let header = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#;
    let msg = refused(&file(&dir, "size.safetensors", header, &eight[..4]));
    assert!(msg.contains("\"a\""), "{msg}");
    // Bad JSON.
    let msg = refused(&file(&dir, "json.safetensors", "{not json", &[]));
    assert!(msg.contains("JSON"), "{msg}");
    // A shape whose element count overflows.
    let header = r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}}"#;
    refused(&file(&dir, "overflow.safetensors", header, &eight[..4]));
    // A header length past the end of the file.
    let p = dir.path().join("hlen.safetensors");
    let mut bytes = 1000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    std::fs::write(&p, bytes).unwrap();
    let msg = refused(&p);
    assert!(msg.contains("header length"), "{msg}");
    // Shorter than the 8-byte length itself.
    let p = dir.path().join("tiny.safetensors");
    std::fs::write(&p, [1u8, 2, 3]).unwrap();
    refused(&p);
    // A missing file.
    refused(&dir.path().join("absent.safetensors"));
}
