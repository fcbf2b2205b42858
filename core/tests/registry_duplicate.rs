//! Two crates registering one name is an error at lookup, not a silent pick of either.

use tl_core::{registry, RegistryError, SampleError, Sampler, SamplerRegistration, SamplingParams};

struct First;

impl Sampler for First {
    fn sample(
        &mut self,
        _logits: &[f32],
        _params: &SamplingParams,
        _prompt: &[u32],
        _output: &[u32],
        _rng: &mut dyn tl_core::Rng,
    ) -> Result<(u32, f64), SampleError> {
        Ok((0, 0.0))
    }
}

inventory::submit! { SamplerRegistration { name: "twice", make: || Box::new(First) } }
inventory::submit! { SamplerRegistration { name: "twice", make: || Box::new(First) } }

#[test]
fn a_duplicate_name_is_an_error() {
    match registry::sampler("twice") {
        Err(RegistryError::Duplicate { kind, name }) => assert_eq!((kind, name.as_str()), ("sampler", "twice")),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a name registered twice was accepted"),
    }
    assert!(registry::sampler_names().is_err());
}
