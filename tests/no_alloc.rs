//! Chapter 10: a decode step allocates nothing. A counting global allocator watches
//! `Model::step` on the bundled checkpoint: once the session's buffers have grown (the
//! prefill and the first step), further steps must not touch the heap, on the serial path
//! the tiny model takes and on the rayon path a bigger call takes.

use llm_anatomy::kernels::Matrix;
use llm_anatomy::qwen3::{Logits, Model};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread's allocations count: the measuring test's thread and its pool's
    /// workers, while it measures. Not the harness's threads, nor a finished test's thread
    /// and pool winding down, which allocate at any moment of another test's measurement.
    /// (A thread the measured code spawned itself would not count either; the engine
    /// spawns none.)
    static WATCHED: Cell<bool> = const { Cell::new(false) };
}

/// Counts an allocation of a watched thread (a const thread-local without a destructor:
/// reading it never allocates).
fn count() {
    if WATCHED.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds
// `GlobalAlloc`'s contract; the counter is a side effect that allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's layout (the caller upholds `alloc`'s contract).
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (via `alloc` above).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as for `dealloc`, and `new_size` is the caller's valid size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The counter is global, so the tests of this file take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The allocations of the calling thread and of every rayon worker (the global pool's, or
/// the pool the caller runs in) while `f` runs. Only while: a finished test's thread and
/// its pool's workers go on allocating as they wind down, maybe during the next test.
fn allocations_during(f: impl FnOnce()) -> usize {
    let watch = |on: bool| {
        WATCHED.set(on);
        rayon::broadcast(|_| WATCHED.set(on));
    };
    watch(true);
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    f();
    let n = ALLOCATIONS.load(Ordering::SeqCst) - before;
    watch(false);
    n
}

#[test]
fn decode_steps_do_not_allocate() {
    decode_steps_without_allocating(16, 64);
}

/// Past 512 positions of the tiny model (4 heads of 8) a decode step's attention is split
/// over the threads (`PARALLEL_DECODE_ATTENTION` in `qwen3::model`), each part with its
/// own buffer.
#[test]
fn long_decode_steps_do_not_allocate() {
    decode_steps_without_allocating(600, 640);
}

/// Eight decode steps after a prompt of `prompt_len` tokens, in a session of `capacity`.
fn decode_steps_without_allocating(prompt_len: u32, capacity: usize) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (config, ckpt) = llm_anatomy::qwen3::open(Path::new("data/tiny-qwen3-moe")).unwrap();
    let model = Model::new(config, &ckpt).unwrap();
    let mut session = model.session(capacity).unwrap();
    let prompt: Vec<u32> = (0..prompt_len).map(|i| 1000 + 37 * i % 4000).collect();
    let logits = model
        .forward(&mut session, &prompt, Logits::Last, None)
        .unwrap();
    let mut next = llm_anatomy::qwen3::generate::argmax(logits) as u32;
    next = llm_anatomy::qwen3::generate::argmax(
        model
            .forward(&mut session, &[next], Logits::Last, None)
            .unwrap(),
    ) as u32;
    let mut produced = Vec::with_capacity(8);
    let n = allocations_during(|| {
        for _ in 0..8 {
            let logits = model
                .forward(&mut session, &[next], Logits::Last, None)
                .unwrap();
            next = llm_anatomy::qwen3::generate::argmax(logits) as u32;
            produced.push(next);
        }
    });
    assert_eq!(n, 0, "{n} allocations in 8 decode steps");
    assert_eq!(produced.len(), 8);
}

#[test]
fn parallel_matmul_does_not_allocate() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // 2048 × 1024 weights: far above the serial threshold, so rayon runs the row blocks.
    let w: Vec<f32> = (0..2048 * 1024).map(|i| (i % 17) as f32 * 1e-3).collect();
    let m = Matrix::f32(&w, 2048, 1024);
    let x = vec![0.5f32; 1024];
    let mut out = vec![0.0f32; 2048];
    // From inside a pool, as `anatomy bench` runs: a call from outside goes through rayon's
    // injector queue, which allocates a block every 63 jobs injected. Each worker's first
    // steal also registers it with crossbeam's epoch collector (one allocation per thread,
    // ever), so the warm-up runs until both workers have surely stolen work.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let n = pool.install(|| {
        for _ in 0..100 {
            m.matmul(&x, &mut out);
        }
        allocations_during(|| {
            for _ in 0..100 {
                m.matmul(&x, &mut out);
            }
        })
    });
    assert_eq!(n, 0, "{n} allocations in 100 parallel matmuls");
    let row1: f64 = w[1024..2048].iter().map(|&v| v as f64 * 0.5).sum();
    assert!(
        (out[1] as f64 - row1).abs() < 1e-4 * row1,
        "{} vs {row1}",
        out[1]
    );
}

/// The same for a GGUF model (weights in llama.cpp's block formats, read block by block)
/// and for a parallel matmul on a Q4_K matrix: dequantising allocates nothing either.
#[test]
fn block_format_weights_do_not_allocate() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = Path::new("tests/fixtures/gguf_models/moe/q4_k_m.gguf");
    let (config, file) = llm_anatomy::qwen3::open(path).unwrap();
    let model = Model::new(config, &file).unwrap();
    let mut session = model.session(200).unwrap();
    let prompt: Vec<u32> = (0..16).map(|i| 3 + 13 * i).collect();
    // Its 256 × 256 matrices take the rayon path: from inside a pool, with a warm-up long
    // enough for both workers to have stolen work (see the test above).
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let n = pool.install(|| {
        let logits = model
            .forward(&mut session, &prompt, Logits::Last, None)
            .unwrap();
        let mut next = llm_anatomy::qwen3::generate::argmax(logits) as u32;
        for _ in 0..150 {
            let logits = model
                .forward(&mut session, &[next], Logits::Last, None)
                .unwrap();
            next = llm_anatomy::qwen3::generate::argmax(logits) as u32;
        }
        allocations_during(|| {
            for _ in 0..8 {
                let logits = model
                    .forward(&mut session, &[next], Logits::Last, None)
                    .unwrap();
                next = llm_anatomy::qwen3::generate::argmax(logits) as u32;
            }
        })
    });
    assert_eq!(n, 0, "{n} allocations in 8 decode steps of a GGUF model");

    let ty = llm_anatomy::quant::GgmlType::Q4_K;
    let w: Vec<f32> = (0..2048 * 1024).map(|i| (i % 17) as f32 * 1e-3).collect();
    let mut bytes = Vec::new();
    llm_anatomy::quant::quantize(ty, &w, &mut bytes);
    let m = Matrix::quant(ty, &bytes, 2048, 1024);
    let x = vec![0.5f32; 1024];
    let mut out = vec![0.0f32; 2048];
    let n = pool.install(|| {
        for _ in 0..100 {
            m.matmul(&x, &mut out);
        }
        allocations_during(|| {
            for _ in 0..20 {
                m.matmul(&x, &mut out);
            }
        })
    });
    assert_eq!(n, 0, "{n} allocations in 20 parallel Q4_K matmuls");
}

/// The int8 path (activations quantised once per matmul into the calling thread's reused
/// buffer, kernels::quant) forced on: decode steps of a GGUF model allocate nothing either.
#[test]
fn int8_decode_steps_do_not_allocate() {
    use llm_anatomy::kernels::quant::with_quant_activations;
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = Path::new("tests/fixtures/gguf_models/moe/q4_k_m.gguf");
    let (config, file) = llm_anatomy::qwen3::open(path).unwrap();
    let model = Model::new(config, &file).unwrap();
    let mut session = model.session(200).unwrap();
    let prompt: Vec<u32> = (0..16).map(|i| 3 + 13 * i).collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let n = pool.install(|| {
        with_quant_activations(true, || {
            let step = |session: &mut _, ids: &[u32]| {
                let logits = model.forward(session, ids, Logits::Last, None).unwrap();
                llm_anatomy::qwen3::generate::argmax(logits) as u32
            };
            let mut next = step(&mut session, &prompt);
            for _ in 0..150 {
                next = step(&mut session, &[next]);
            }
            allocations_during(|| {
                for _ in 0..8 {
                    next = step(&mut session, &[next]);
                }
            })
        })
    });
    assert_eq!(
        n, 0,
        "{n} allocations in 8 int8 decode steps of a GGUF model"
    );
}
