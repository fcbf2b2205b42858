//! How alike two texts are by their vectors, and the distinct texts of a list of pairs:
//! shared by rerank.rs, score.rs and encoder.rs (a leaf, so none of them imports another
//! for it).

/// Cosine similarity, in f64; 0 when either vector is all zeros.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    dot / (na.sqrt() * nb.sqrt())
}

/// The distinct texts of `pairs` (first appearance first) and each pair as two indices
/// into them: a text several pairs share (a query) is embedded once.
pub(crate) fn distinct<'a>(pairs: &[(&'a str, &'a str)]) -> (Vec<&'a str>, Vec<(usize, usize)>) {
    let mut texts: Vec<&'a str> = Vec::new();
    let mut at = |t: &'a str| match texts.iter().position(|&x| x == t) {
        Some(i) => i,
        None => {
            texts.push(t);
            texts.len() - 1
        }
    };
    let idx = pairs.iter().map(|&(a, b)| (at(a), at(b))).collect();
    (texts, idx)
}
