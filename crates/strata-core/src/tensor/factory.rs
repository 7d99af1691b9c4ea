//! Creating tensors on a chosen device: PyTorch's `device=` argument of the factories.
//!
//! `Tensor::zeros(..)` and the other factories make CPU tensors, as PyTorch's default device
//! does. [`Tensor::on`] names another device once and offers the same factories with the same
//! arguments:
//!
//! ```
//! use strata_core::{DType, Device, Tensor};
//! let x = Tensor::on(Device::Cpu).zeros(&[2, 3], DType::F32)?;
//! assert_eq!(x.device(), Device::Cpu);
//! // A device this build cannot hold data on is an error before anything is allocated.
//! let err = Tensor::on(Device::Cuda(0)).ones(&[2], DType::F32).unwrap_err();
//! assert!(err.to_string().contains("CUDA"));
//! # Ok::<(), strata_core::Error>(())
//! ```

use crate::backend::check_device;
use crate::device::DefaultDevice;
use crate::dtype::Element;
use crate::layout::shape_arg::IntoShape;
use crate::random::Generator;
use crate::tensor::arange::ArangeRange;
use crate::{DType, Device, Result, Scalar, Tensor};

/// The factories of one device, from [`Tensor::on`]: `Tensor::on(device).zeros(shape, dtype)`
/// is PyTorch's `torch.zeros(shape, dtype=dtype, device=device)`.
///
/// Every method takes the arguments of the [`Tensor`] factory of the same name. The device is
/// checked first: a device without a backend in this build ([`Device::Cuda`] without CUDA
/// support) is an [`Error::Unsupported`](crate::Error) naming it, and nothing is allocated,
/// drawn from a generator or written. On [`Device::Meta`] the random factories draw nothing
/// and the data of `from_vec`/`from_slice` gives only the shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Factory {
    device: Device,
}

impl Tensor {
    /// The factories of `device` (see [`Factory`]).
    ///
    /// ```
    /// use strata_core::{DType, Device, Tensor};
    /// let cpu = Tensor::on(Device::Cpu);
    /// let w = cpu.randn(&[4, 4], DType::F32)?;
    /// let i = cpu.arange(4, DType::I64)?;
    /// assert_eq!((w.device(), i.device()), (Device::Cpu, Device::Cpu));
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    pub fn on(device: Device) -> Factory {
        Factory { device }
    }
}

impl Factory {
    /// The device these factories make tensors on.
    pub fn device(self) -> Device {
        self.device
    }

    /// [`Tensor::zeros`] on this device.
    #[track_caller]
    pub fn zeros(self, shape: &(impl IntoShape + ?Sized), dtype: DType) -> Result<Tensor> {
        check_device(self.device, "zeros")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::zeros(shape, dtype)
    }

    /// [`Tensor::empty`] on this device.
    #[track_caller]
    pub fn empty(self, shape: &(impl IntoShape + ?Sized), dtype: DType) -> Result<Tensor> {
        check_device(self.device, "empty")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::empty(shape, dtype)
    }

    /// [`Tensor::ones`] on this device.
    #[track_caller]
    pub fn ones(self, shape: &(impl IntoShape + ?Sized), dtype: DType) -> Result<Tensor> {
        check_device(self.device, "ones")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::ones(shape, dtype)
    }

    /// [`Tensor::full`] on this device.
    #[track_caller]
    pub fn full(
        self,
        shape: &(impl IntoShape + ?Sized),
        value: impl Into<Scalar>,
        dtype: DType,
    ) -> Result<Tensor> {
        check_device(self.device, "full")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::full(shape, value, dtype)
    }

    /// [`Tensor::arange`] on this device.
    #[track_caller]
    pub fn arange(self, range: impl Into<ArangeRange>, dtype: DType) -> Result<Tensor> {
        check_device(self.device, "arange")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::arange(range, dtype)
    }

    /// [`Tensor::eye`] on this device.
    #[track_caller]
    pub fn eye(self, n: usize, dtype: DType) -> Result<Tensor> {
        check_device(self.device, "eye")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::eye(n, dtype)
    }

    /// [`Tensor::from_vec`] on this device.
    #[track_caller]
    pub fn from_vec<T: Element>(
        self,
        data: Vec<T>,
        shape: &(impl IntoShape + ?Sized),
    ) -> Result<Tensor> {
        check_device(self.device, "from_vec")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::from_vec(data, shape)
    }

    /// [`Tensor::from_slice`] on this device.
    #[track_caller]
    pub fn from_slice<T: Element>(
        self,
        data: &[T],
        shape: &(impl IntoShape + ?Sized),
    ) -> Result<Tensor> {
        check_device(self.device, "from_slice")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::from_slice(data, shape)
    }

    /// [`Tensor::scalar`] on this device.
    #[track_caller]
    pub fn scalar(self, value: impl Into<Scalar>, dtype: DType) -> Result<Tensor> {
        check_device(self.device, "scalar_tensor")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::scalar(value, dtype)
    }

    /// [`Tensor::rand`] on this device.
    #[track_caller]
    pub fn rand(self, shape: &(impl IntoShape + ?Sized), dtype: DType) -> Result<Tensor> {
        check_device(self.device, "rand")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::rand(shape, dtype)
    }

    /// [`Tensor::randint`] on this device.
    #[track_caller]
    pub fn randint(
        self,
        low: i64,
        high: i64,
        shape: &(impl IntoShape + ?Sized),
        dtype: DType,
    ) -> Result<Tensor> {
        check_device(self.device, "randint")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::randint(low, high, shape, dtype)
    }

    /// [`Tensor::randn`] on this device.
    #[track_caller]
    pub fn randn(self, shape: &(impl IntoShape + ?Sized), dtype: DType) -> Result<Tensor> {
        check_device(self.device, "randn")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::randn(shape, dtype)
    }

    /// [`Tensor::rand_with`] on this device.
    #[track_caller]
    pub fn rand_with(
        self,
        shape: &(impl IntoShape + ?Sized),
        dtype: DType,
        generator: &mut Generator,
    ) -> Result<Tensor> {
        check_device(self.device, "rand")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::rand_with(shape, dtype, generator)
    }

    /// [`Tensor::randn_with`] on this device.
    #[track_caller]
    pub fn randn_with(
        self,
        shape: &(impl IntoShape + ?Sized),
        dtype: DType,
        generator: &mut Generator,
    ) -> Result<Tensor> {
        check_device(self.device, "randn")?;
        let _device = DefaultDevice::set(self.device);
        Tensor::randn_with(shape, dtype, generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    /// Every factory, called through `f`.
    fn each_factory(f: Factory) -> Vec<(&'static str, Result<Tensor>)> {
        let mut g = Generator::new(0);
        vec![
            ("zeros", f.zeros(&[2, 3], DType::F32)),
            ("empty", f.empty(&[2], DType::I64)),
            ("ones", f.ones(&[3], DType::BF16)),
            ("full", f.full(&[2], 7, DType::I32)),
            ("arange", f.arange(5, DType::F64)),
            ("eye", f.eye(3, DType::U8)),
            ("from_vec", f.from_vec(vec![1.0f32, 2.0], &[2])),
            ("from_slice", f.from_slice(&[true, false], &[2])),
            ("scalar_tensor", f.scalar(2.5, DType::F16)),
            ("rand", f.rand(&[4], DType::F32)),
            ("randn", f.randn(&[4], DType::F64)),
            ("rand", f.rand_with(&[4], DType::F32, &mut g)),
            ("randn", f.randn_with(&[4], DType::F32, &mut g)),
        ]
    }

    #[test]
    fn every_factory_on_the_cpu_matches_the_plain_factory() -> Result<()> {
        for (op, t) in each_factory(Tensor::on(Device::Cpu)) {
            let t = t?;
            assert_eq!(t.device(), Device::Cpu, "{op}");
        }
        let on = Tensor::on(Device::Cpu).full(&[2, 2], 3.5, DType::F32)?;
        assert_eq!(on.to_vec::<f32>()?, vec![3.5; 4]);
        let mut a = Generator::new(7);
        let mut b = Generator::new(7);
        let x = Tensor::on(Device::Cpu).randn_with(&[8], DType::F32, &mut a)?;
        let y = Tensor::randn_with(&[8], DType::F32, &mut b)?;
        assert_eq!(x.to_vec::<f32>()?, y.to_vec::<f32>()?);
        Ok(())
    }

    #[test]
    fn devices_without_a_backend_refuse_every_factory_naming_the_op() {
        for i in [0, 3] {
            for (op, t) in each_factory(Tensor::on(Device::Cuda(i))) {
                match t {
                    Err(Error::Unsupported { op: named, message }) => {
                        assert_eq!(named, op);
                        assert!(message.contains("CUDA"), "{message}");
                        assert!(message.contains(&format!("cuda:{i}")), "{message}");
                    }
                    other => panic!("{op} on cuda:{i}: expected Unsupported, got {other:?}"),
                }
            }
        }
    }

    #[test]
    fn every_factory_works_on_meta_and_the_random_ones_draw_nothing() -> Result<()> {
        for (op, t) in each_factory(Tensor::on(Device::Meta)) {
            let t = t?;
            assert_eq!(t.device(), Device::Meta, "{op}");
        }
        let mut g = Generator::new(3);
        let before = g.get_state();
        let x = Tensor::on(Device::Meta).randn_with(&[1 << 20], DType::F32, &mut g)?;
        assert_eq!(x.shape().as_slice(), [1 << 20]);
        assert_eq!(g.get_state(), before);
        Ok(())
    }

    #[test]
    fn a_refused_device_draws_nothing_from_the_generator() -> Result<()> {
        let mut g = Generator::new(1);
        let before = g.get_state();
        assert!(Tensor::on(Device::Cuda(0))
            .rand_with(&[16], DType::F32, &mut g)
            .is_err());
        assert_eq!(g.get_state(), before);
        Ok(())
    }
}
