//! Extension without editing core: an architecture and a KV backend defined and
//! registered in this test file, picked by name through the registry and the runner.

use std::any::Any;
use std::sync::Arc;

use tl_core::{
    registry, ArchRegistration, Architecture, BuildCtx, ConfigError, EngineConfig, ForwardBatch, ForwardCtx,
    ForwardOutput, KvBackend, KvError, KvGeometry, KvRegistration, KvSlabs, KvSpec, Logits, Model, ModelConfig,
    ModelError, ModelRunner, RegistryError, RunnerError,
};

/// A toy architecture: logits are `scale * (position of the last token + 1)` at id
/// `token`, and it writes each token id into its KV slot so the test can see the writes.
struct Echo;

struct EchoConfig {
    scale: f32,
}

struct EchoModel {
    vocab: usize,
    scale: f32,
    bias: Vec<f32>, // (vocab,) from the checkpoint
}

impl Architecture for Echo {
    fn parse_config(&self, config: &ModelConfig) -> Result<Arc<dyn Any + Send + Sync>, ConfigError> {
        let v = &config.json()["echo_scale"];
        let scale = v.as_f64().ok_or_else(|| ConfigError::invalid("echo_scale", v, "expected a number"))?;
        Ok(Arc::new(EchoConfig { scale: scale as f32 }))
    }

    fn kv_geometry(&self, _config: &ModelConfig, block_tokens: u32) -> Result<KvGeometry, ConfigError> {
        Ok(KvGeometry { n_layers: 1, n_kv_heads: 1, head_dim: 1, block_tokens })
    }

    fn build(&self, ctx: BuildCtx<'_>) -> Result<Box<dyn Model>, ModelError> {
        let vocab = ctx.config.vocab_size;
        let scale = ctx.config.arch_config::<EchoConfig>()?.scale;
        let bias = ctx.weights.f32("echo.bias", &[vocab])?;
        Ok(Box::new(EchoModel { vocab, scale, bias }))
    }
}

impl Model for EchoModel {
    fn hidden_size(&self) -> usize {
        1
    }

    fn forward(&self, batch: &ForwardBatch, ctx: &mut ForwardCtx<'_>) -> Result<ForwardOutput, ModelError> {
        let b = ctx.kv.geometry().block_tokens as usize;
        let mut data = Vec::new();
        for s in &batch.seqs {
            for (i, &t) in s.tokens.iter().enumerate() {
                let pos = s.start + i;
                ctx.kv.slab_mut(s.blocks[pos / b], 0, false)?[pos % b] = t as u16;
            }
            let mut row = self.bias.clone();
            let last = *s.tokens.last().unwrap_or(&0) as usize;
            row[last] += self.scale * (s.start + s.tokens.len()) as f32;
            data.extend(row);
        }
        let hidden =
            ctx.want_hidden.then(|| batch.seqs.iter().flat_map(|s| s.tokens.iter().map(|&t| t as f32)).collect());
        Ok(ForwardOutput { logits: Logits { vocab: self.vocab, data }, hidden })
    }
}

inventory::submit! { ArchRegistration { name: "echo-test", make: || Box::new(Echo) } }

/// A minimal KV backend living outside tl-core and tl-kv: no prefix cache, a Vec per slab.
struct VecPool {
    geometry: KvGeometry,
    refs: Vec<u32>,
    fill: Vec<u32>,
    slabs: Vec<Vec<u16>>, // (blocks * layers * 2) slabs of (kv_heads, B, D)
}

impl VecPool {
    fn check(&self, id: u32) -> Result<usize, KvError> {
        let n_blocks = self.refs.len() as u32;
        if id >= n_blocks {
            return Err(KvError::BadId { id, n_blocks });
        }
        Ok(id as usize)
    }
    fn slab_index(&self, id: u32, layer: u32, is_v: bool) -> Result<usize, KvError> {
        let i = self.check(id)?;
        if layer >= self.geometry.n_layers {
            return Err(KvError::BadLayer { layer, n_layers: self.geometry.n_layers });
        }
        Ok((i * self.geometry.n_layers as usize + layer as usize) * 2 + is_v as usize)
    }
}

impl KvSlabs for VecPool {
    fn geometry(&self) -> KvGeometry {
        self.geometry
    }
    fn slab(&self, id: u32, layer: u32, is_v: bool) -> Result<&[u16], KvError> {
        Ok(&self.slabs[self.slab_index(id, layer, is_v)?])
    }
    fn slab_mut(&mut self, id: u32, layer: u32, is_v: bool) -> Result<&mut [u16], KvError> {
        let i = self.slab_index(id, layer, is_v)?;
        Ok(&mut self.slabs[i])
    }
}

impl KvBackend for VecPool {
    fn n_blocks(&self) -> u32 {
        self.refs.len() as u32
    }
    fn alloc(&mut self, n: usize) -> Result<Vec<u32>, KvError> {
        let free: Vec<u32> = (0..self.n_blocks()).filter(|&i| self.refs[i as usize] == 0).take(n).collect();
        if free.len() < n {
            return Err(KvError::OutOfBlocks { requested: n, available: free.len() });
        }
        for &i in &free {
            self.refs[i as usize] = 1;
            self.fill[i as usize] = 0;
        }
        Ok(free)
    }
    fn retain(&mut self, id: u32) -> Result<(), KvError> {
        let i = self.check(id)?;
        if self.refs[i] == 0 {
            return Err(KvError::NotInUse { id });
        }
        self.refs[i] += 1;
        Ok(())
    }
    fn release(&mut self, id: u32) -> Result<(), KvError> {
        let i = self.check(id)?;
        if self.refs[i] == 0 {
            return Err(KvError::NotInUse { id });
        }
        self.refs[i] -= 1;
        Ok(())
    }
    fn refs(&self, id: u32) -> Result<u32, KvError> {
        Ok(self.refs[self.check(id)?])
    }
    fn fill(&self, id: u32) -> Result<u32, KvError> {
        Ok(self.fill[self.check(id)?])
    }
    fn set_fill(&mut self, id: u32, n: u32) -> Result<(), KvError> {
        let i = self.check(id)?;
        self.fill[i] = n;
        Ok(())
    }
    fn register(&mut self, _id: u32, _hash: u64) -> Result<(), KvError> {
        Ok(())
    }
    fn lookup(&mut self, _hash: u64) -> Option<u32> {
        None
    }
    fn n_free(&self) -> usize {
        self.refs.iter().filter(|&&r| r == 0).count()
    }
    fn n_cached(&self) -> usize {
        0
    }
    fn n_in_use(&self) -> usize {
        self.refs.iter().filter(|&&r| r > 0).count()
    }
    fn export(&self, _ids: &[u32]) -> Result<Vec<u8>, KvError> {
        Err(KvError::Backend("vec-test cannot export".into()))
    }
    fn import(&mut self, _buf: &[u8]) -> Result<Vec<u32>, KvError> {
        Err(KvError::Backend("vec-test cannot import".into()))
    }
}

fn make_vec_pool(spec: &KvSpec) -> Result<Box<dyn KvBackend>, KvError> {
    let g = spec.geometry;
    let n = spec.n_blocks as usize;
    let elems = g.slab_elems().ok_or(KvError::Overflow { what: "slab".into() })?;
    Ok(Box::new(VecPool {
        geometry: g,
        refs: vec![0; n],
        fill: vec![0; n],
        slabs: vec![vec![0; elems]; n * g.n_layers as usize * 2],
    }))
}

inventory::submit! { KvRegistration { name: "vec-test", make: make_vec_pool } }

/// A model directory for the echo architecture: config.json + a one-tensor safetensors.
fn echo_dir(vocab: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(r#"{{"tl_arch":"echo-test","tl_tokenizer":"byte","vocab_size":{vocab},"echo_scale":0.5}}"#);
    std::fs::write(dir.path().join("config.json"), config).unwrap();
    let header = format!(r#"{{"echo.bias":{{"dtype":"F32","shape":[{vocab}],"data_offsets":[0,{}]}}}}"#, vocab * 4);
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    for i in 0..vocab {
        bytes.extend((i as f32 * 0.001).to_le_bytes());
    }
    std::fs::write(dir.path().join("model.safetensors"), bytes).unwrap();
    dir
}

fn engine(kv: &str) -> EngineConfig {
    let mut cfg = EngineConfig::default();
    cfg.kv.backend = kv.into();
    cfg.kv.n_blocks = Some(8);
    cfg.kv.block_tokens = 4;
    cfg
}

#[test]
fn a_new_architecture_registers_without_editing_core() {
    assert!(registry::architecture_names().unwrap().contains(&"echo-test"));
    let dir = echo_dir(300);
    let cfg = ModelConfig::load(dir.path()).unwrap();
    assert_eq!(cfg.arch, "echo-test");
    assert_eq!(cfg.arch_config::<EchoConfig>().unwrap().scale, 0.5);

    let mut runner = ModelRunner::load(dir.path(), &engine("vec-test")).unwrap();
    let (hidden, last) = runner.run_once(&[7, 9, 11]).unwrap();
    assert_eq!(hidden, vec![7.0, 9.0, 11.0]);
    assert_eq!(last.len(), 300);
    assert_eq!(last[11], 11.0 * 0.001 + 0.5 * 3.0);
    assert_eq!(last[10], 10.0 * 0.001);
}

#[test]
fn the_runner_uses_a_kv_backend_registered_outside_core_and_tl_kv() {
    assert!(registry::kv_backend_names().unwrap().contains(&"vec-test"));
    let dir = echo_dir(300);
    let mut runner = ModelRunner::load(dir.path(), &engine("vec-test")).unwrap();
    let pool = runner.pool();
    let is_vec_pool = (&**pool.lock().unwrap() as &dyn Any).downcast_ref::<VecPool>().is_some();
    assert!(is_vec_pool, "the pool is not the test backend");

    let blocks = pool.lock().unwrap().alloc(2).unwrap();
    let logits = runner.forward(&ForwardBatch::single(&[1, 2, 3, 4, 5], 0, &blocks)).unwrap();
    assert_eq!(logits.rows(), 1);
    // The forward wrote each token into its slot (position j: block j/4, slot j%4) and the
    // runner recorded the fills: a full first block, one slot of the second.
    let p = pool.lock().unwrap();
    assert_eq!(&p.slab(blocks[0], 0, false).unwrap()[..4], &[1, 2, 3, 4]);
    assert_eq!(p.slab(blocks[1], 0, false).unwrap()[0], 5);
    assert_eq!((p.fill(blocks[0]).unwrap(), p.fill(blocks[1]).unwrap()), (4, 1));
}

#[test]
fn unknown_names_list_the_registered_ones() {
    let dir = echo_dir(300);
    match ModelRunner::load(dir.path(), &engine("no-such-pool")) {
        Err(RunnerError::Registry(RegistryError::Unknown { kind, name, known })) => {
            assert_eq!((kind, name.as_str()), ("KV backend", "no-such-pool"));
            assert!(known.contains(&"vec-test".to_string()), "{known:?}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("an unknown KV backend was accepted"),
    }
    let err = ModelConfig::from_json(r#"{"tl_arch":"nope","tl_tokenizer":"byte","vocab_size":256}"#).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("\"nope\"") && msg.contains("echo-test"), "{msg}");
    let err = registry::sampler("nope").err().unwrap();
    assert!(matches!(err, RegistryError::Unknown { kind: "sampler", .. }), "{err}");
}

#[test]
fn the_runner_refuses_bad_batches_before_the_pool_changes() {
    let dir = echo_dir(300);
    let mut runner = ModelRunner::load(dir.path(), &engine("vec-test")).unwrap();
    let pool = runner.pool();
    let blocks = pool.lock().unwrap().alloc(2).unwrap();
    let snapshot = |p: &tl_core::SharedPool| -> Vec<u16> {
        let p = p.lock().unwrap();
        (0..8).flat_map(|id| p.slab(id, 0, false).unwrap().to_vec()).collect()
    };
    let before = snapshot(&pool);
    let free_block = (0..8u32).find(|id| !blocks.contains(id)).unwrap();
    let cases: Vec<(&str, ForwardBatch)> = vec![
        ("empty batch", ForwardBatch::default()),
        ("empty sequence", ForwardBatch::single(&[], 0, &blocks)),
        ("token >= vocab", ForwardBatch::single(&[1, 300], 0, &blocks)),
        ("short block table", ForwardBatch::single(&[1, 2, 3], 6, &blocks)),
        ("unallocated block", ForwardBatch::single(&[1], 0, std::slice::from_ref(&free_block))),
        ("bad block id", ForwardBatch::single(&[1], 0, &[99])),
    ];
    for (what, batch) in cases {
        assert!(runner.forward(&batch).is_err(), "{what} was accepted");
        assert_eq!(snapshot(&pool), before, "{what} changed a slab");
    }
    // Two sequences writing the same block in one step would race on its slots.
    let b2 = [blocks[0]];
    let batch = ForwardBatch {
        seqs: vec![
            tl_core::ForwardSeq { tokens: &[1], start: 0, blocks: &b2, adapter: None },
            tl_core::ForwardSeq { tokens: &[2], start: 1, blocks: &b2, adapter: None },
        ],
    };
    assert!(runner.forward(&batch).is_err());
    assert_eq!(snapshot(&pool), before);
}
