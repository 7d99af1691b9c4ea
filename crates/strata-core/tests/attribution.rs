//! Attribution: scopes on every allocation (backward's included), the observer's memory
//! events, and the live graph by forward site. One test: the observer is process-wide.

use std::sync::{Arc, Mutex};

use strata_alloc::{
    AllocatorConfig, CachingAllocator, Category, DeviceAllocator, Grouping, VirtualBacking,
};
use strata_core::autograd::live_graph;
use strata_core::observer::{set_observer, AllocEvent, MemoryAction, OpObserver};
use strata_core::op::OpInput;
use strata_core::{scope, with_device_allocator, DType, Device, Result, Tensor};

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<AllocEvent>>,
    ops: Mutex<Vec<(&'static str, Vec<OpInput>)>>,
}

impl OpObserver for Recorder {
    fn memory(&self, event: &AllocEvent) {
        self.events.lock().unwrap().push(*event);
    }
    fn op_begin(
        &self,
        op: &'static str,
        _: &'static std::panic::Location<'static>,
        inputs: &[OpInput],
    ) {
        self.ops.lock().unwrap().push((op, inputs.to_vec()));
    }
    fn op_end(&self, _: &'static str) {}
}

#[test]
fn allocations_name_their_scope_and_the_observer_and_graph_report_them() -> Result<()> {
    let caching = Arc::new(CachingAllocator::with_config(
        VirtualBacking::new(1 << 40),
        AllocatorConfig::default(),
    ));
    let allocator: Arc<dyn strata_alloc::DeviceAllocator> = caching.clone();
    let recorder = Arc::new(Recorder::default());
    set_observer(Some(recorder.clone()));
    let outcome = with_device_allocator(Device::Meta, &allocator, || -> Result<()> {
        let on = Tensor::on(Device::Meta);
        let w = {
            let _s = scope::enter("encoder");
            let _l = scope::enter("layers.0");
            on.randn(&[512, 512], DType::F32)?.requires_grad_(true)?
        };
        let x = on.randn(&[64, 512], DType::F32)?;
        let (h, loss) = {
            let _s = scope::enter("encoder");
            let _l = scope::enter("layers.1");
            let h = x.matmul(&w)?.tanh()?;
            let loss = h.sum(None, false)?;
            (h, loss)
        };
        // Live memory by scope: the weight under layers.0, the activation under layers.1.
        let by_scope = caching.live_allocations_by(Grouping::Scope);
        let bytes = |key: &str| {
            by_scope
                .iter()
                .find(|g| g.key == key)
                .map_or(0, |g| g.bytes)
        };
        assert_eq!(bytes("encoder.layers.0"), 512 * 512 * 4);
        assert!(bytes("encoder.layers.1") >= 64 * 512 * 4);
        // The graph still alive, by forward site: tanh saved its output here.
        let graph = live_graph();
        let tanh = graph
            .iter()
            .find(|g| g.site.op == "TanhBackward0")
            .expect("the tanh node is alive");
        assert_eq!((tanh.nodes, tanh.saved_tensors), (1, 1));
        assert_eq!(tanh.site.scope, "encoder.layers.1");
        assert_eq!(tanh.saved_bytes, 64 * 512 * 4);
        assert_eq!(h.memory_category(), Category::Activation);
        drop(h);
        // Backward allocates under the forward op's scope, not the caller's.
        let before = recorder.events.lock().unwrap().len();
        loss.backward()?;
        let events = recorder.events.lock().unwrap()[before..].to_vec();
        // The seed gradient belongs to the caller of backward, outside every scope.
        let seed = &events[0];
        assert_eq!((seed.site.op, seed.site.scope), ("ones", ""));
        assert_eq!(seed.site.file, file!());
        let grads: Vec<&AllocEvent> = events[1..]
            .iter()
            .filter(|e| e.action == MemoryAction::Alloc)
            .collect();
        assert!(!grads.is_empty());
        assert!(
            grads.iter().all(|e| e.site.scope == "encoder.layers.1"),
            "{grads:?}"
        );
        assert!(grads.iter().all(|e| e.device == Device::Meta));
        // Backward released what the node saved (the node lives on while `loss` does); the
        // tanh output was freed as an activation.
        let tanh_now = |g: &&strata_core::autograd::GraphUsage| g.site.op == "TanhBackward0";
        let after = live_graph();
        let tanh = after
            .iter()
            .find(tanh_now)
            .expect("loss still holds its graph");
        assert_eq!(
            (tanh.nodes, tanh.saved_tensors, tanh.saved_bytes),
            (1, 0, 0)
        );
        let frees = recorder.events.lock().unwrap();
        assert!(frees.iter().any(|e| e.action == MemoryAction::Free
            && e.site.op == "tanh"
            && e.category == Category::Activation));
        drop(frees);
        // Snapshots carry the scope as a frame.
        let snapshot = caching.snapshot();
        let has_scope_frame = snapshot.segments.iter().flat_map(|s| &s.blocks).any(|b| {
            b.frames
                .iter()
                .any(|f| f.filename == "<scope>" && f.name == "encoder.layers.0")
        });
        assert!(has_scope_frame);
        drop((w, loss));
        assert!(live_graph().iter().all(|g| g.site.op != "TanhBackward0"));
        // A plain result whose objects the thread keeps for the next op (a spare): its free
        // is still reported when it drops, with its bytes and category, and its memory is
        // back at once.
        let a = Tensor::on(Device::Meta).ones(&[1000], DType::F32)?;
        let sum = a.add(&a)?;
        let held = caching.memory_allocated();
        let before = recorder.events.lock().unwrap().len();
        drop(sum);
        assert_eq!(caching.memory_allocated(), held - 4096);
        let events = recorder.events.lock().unwrap()[before..].to_vec();
        assert!(
            events.iter().any(|e| e.action == MemoryAction::Free
                && e.bytes == 4000
                && e.site.op == "add"
                && e.category == Category::Temporary),
            "{events:?}"
        );
        // The next result refills those objects and is reported as a new allocation.
        let before = recorder.events.lock().unwrap().len();
        let product = a.mul(&a)?;
        let events = recorder.events.lock().unwrap()[before..].to_vec();
        assert!(
            events
                .iter()
                .any(|e| e.action == MemoryAction::Alloc && e.bytes == 4000 && e.site.op == "mul"),
            "{events:?}"
        );
        assert_eq!(caching.memory_allocated(), held);
        drop(product);
        Ok(())
    });
    set_observer(None);
    outcome?;
    // The observer saw op begins with their operands' shapes and dtypes.
    let ops = recorder.ops.lock().unwrap();
    assert!(ops.iter().any(|(op, inputs)| *op == "matmul"
        && inputs.iter().map(|i| i.shape.clone()).collect::<Vec<_>>()
            == vec![vec![64, 512], vec![512, 512]]));
    Ok(())
}
