//! The neural encoders' models (`paraforge_encoders::nn_model`, re-exported
//! here: the network with its vocabulary, its directory on disk, batched
//! embedding) and what training adds: the device a run trains on and the
//! check, after every update, that the weights are still finite numbers.

use burn::module::Param;
use burn::tensor::Tensor;

pub use paraforge_encoders::nn_model::*;

use crate::TrainError;

/// `--device`: cpu, or cuda:N in a build with the `cuda` feature.
pub fn device(name: &str) -> Result<Device, TrainError> {
    let bad = |why: &str| TrainError::Invalid(format!("--device {name}: {why}"));
    if name == "cpu" {
        return Ok(cpu());
    }
    let n: usize = name
        .strip_prefix("cuda:")
        .ok_or_else(|| bad("cpu or cuda:N"))?
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
