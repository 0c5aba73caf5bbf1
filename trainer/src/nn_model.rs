//! The neural encoders' models (`paraforge_encoders::nn_model`, re-exported
//! here: the network with its vocabulary, its directory on disk, batched
//! embedding) and what training adds: the device a run trains on and the
//! check, after every update, that the weights are still finite numbers.

use burn::module::Param;
use burn::tensor::Tensor;

pub use paraforge_encoders::nn_model::*;

use crate::TrainError;

/// `--device`: cpu; cuda:N in a build with the `cuda` feature; wgpu (the
/// adapter wgpu ranks first), wgpu:N (the N-th discrete GPU) or wgpu:cpu (a
/// software adapter such as Mesa's lavapipe) in a build with `wgpu`.
pub fn device(name: &str) -> Result<Device, TrainError> {
    let bad = |why: &str| TrainError::Invalid(format!("--device {name}: {why}"));
    if name == "cpu" {
        return Ok(cpu());
    }
    if name == "wgpu" || name.starts_with("wgpu:") {
        return wgpu_device(name.strip_prefix("wgpu").unwrap_or_default(), bad);
    }
    let n: usize = name
        .strip_prefix("cuda:")
        .ok_or_else(|| bad("cpu, cuda:N, wgpu, wgpu:N or wgpu:cpu"))?
        .parse()
        .map_err(|_| bad("cuda:N with N a GPU index"))?;
    #[cfg(feature = "cuda")]
    return Ok(Device::cuda(n));
    #[cfg(not(feature = "cuda"))]
    {
        let _ = n;
        Err(bad("this paraforge was built without the `cuda` feature"))
    }
}

/// `rest` is what follows `wgpu`: empty, `:cpu` or `:N`.
fn wgpu_device(rest: &str, bad: impl Fn(&str) -> TrainError) -> Result<Device, TrainError> {
    use burn::tensor::DeviceKind;
    let kind = match rest {
        "" => DeviceKind::DefaultDevice,
        ":cpu" => DeviceKind::Cpu,
        n => DeviceKind::DiscreteGpu(
            n[1..]
                .parse()
                .map_err(|_| bad("wgpu:N with N a discrete GPU's index, or wgpu:cpu"))?,
        ),
    };
    #[cfg(feature = "wgpu")]
    return Ok(Device::wgpu(kind));
    #[cfg(not(feature = "wgpu"))]
    {
        let _ = kind;
        Err(bad("this paraforge was built without the `wgpu` feature"))
    }
}

/// The first of `params` holding a value that is not a finite number, as
/// "parameter NAME row R (VALUE)".
pub fn first_non_finite(params: &[(String, &Param<Tensor<2>>)]) -> Option<String> {
    // This runs after every step: one sum per parameter on the device and
    // one number read back. A NaN or infinity makes the sum non-finite;
    // only then is each parameter read to name the row (a sum that merely
    // overflowed finds none and is let go).
    let total = params
        .iter()
        .map(|(_, p)| p.val().sum())
        .reduce(|a, b| a + b)?;
    if total.into_scalar::<f64>().is_finite() {
        return None;
    }
    params.iter().find_map(|(name, p)| {
        let t = p.val();
        let cols = t.dims()[1].max(1);
        let v = table(t);
        let i = v.iter().position(|x| !x.is_finite())?;
        Some(format!("parameter {name:?} row {} ({})", i / cols, v[i]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Device names: the malformed refused by name; a GPU kind this build
    /// lacks refused naming its cargo feature rather than run on the CPU.
    #[test]
    fn device_names_are_checked() {
        assert!(device("cpu").is_ok());
        for (name, says) in [
            ("gpu", "cpu, cuda:N, wgpu, wgpu:N or wgpu:cpu"),
            ("cuda:x", "cuda:N with N a GPU index"),
            ("wgpu:", "wgpu:N with N"),
            ("wgpu:gpu", "wgpu:N with N"),
            ("wgpux", "cpu, cuda:N, wgpu, wgpu:N or wgpu:cpu"),
        ] {
            let e = device(name)
                .err()
                .unwrap_or_else(|| panic!("{name} accepted"));
            assert!(e.to_string().contains(says), "{name}: {e}");
            assert!(e.to_string().contains(name), "{name}: {e}");
        }
        #[cfg(not(feature = "cuda"))]
        assert!(device("cuda:0")
            .unwrap_err()
            .to_string()
            .contains("`cuda` feature"));
        #[cfg(not(feature = "wgpu"))]
        for name in ["wgpu", "wgpu:0", "wgpu:cpu"] {
            assert!(device(name)
                .unwrap_err()
                .to_string()
                .contains("`wgpu` feature"));
        }
    }
}
