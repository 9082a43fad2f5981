//! Custom gauges and counters on Triton's metrics endpoint (`/metrics`),
//! labelled by model.

use std::ffi::CString;
use std::ptr;
use std::sync::OnceLock;

use super::error::call;
use super::sys;
use crate::error::{Error, Result};

struct Family(*mut sys::TRITONSERVER_MetricFamily);
// SAFETY: the server's metric objects are internally synchronized.
unsafe impl Send for Family {}
// SAFETY: as above.
unsafe impl Sync for Family {}

/// One metric of a process-wide family. Families are created once per
/// process and kept: Triton refuses a second family of the same name.
struct Metric(*mut sys::TRITONSERVER_Metric);
// SAFETY: as above; `set` and `increment` are thread-safe server calls.
unsafe impl Send for Metric {}
// SAFETY: as above.
unsafe impl Sync for Metric {}

/// A value that goes up and down (`set`).
pub struct Gauge(Metric);

/// A count that only goes up (`increment`).
pub struct Counter(Metric);

/// Families made so far in this process, by name (creation errors too, so a
/// refused family is not retried on every model load).
type Families = std::sync::Mutex<Vec<(&'static str, Result<Family>)>>;

fn family(
    kind: sys::TRITONSERVER_MetricKind,
    name: &'static str,
    description: &'static str,
) -> Result<*mut sys::TRITONSERVER_MetricFamily> {
    static FAMILIES: OnceLock<Families> = OnceLock::new();
    let mut families = FAMILIES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some((_, f)) = families.iter().find(|(n, _)| *n == name) {
        return f.as_ref().map(|f| f.0).map_err(Clone::clone);
    }
    let created = (|| {
        let api = metrics()?;
        let (c_name, c_desc) = (cstr(name)?, cstr(description)?);
        let mut family = ptr::null_mut();
        call!(api.TRITONSERVER_MetricFamilyNew(
            &mut family,
            kind,
            c_name.as_ptr(),
            c_desc.as_ptr()
        ))?;
        Ok(Family(family))
    })();
    let out = created.as_ref().map(|f| f.0).map_err(Clone::clone);
    families.push((name, created));
    out
}

/// The optional metrics API; without it the gauges are left out (the caller
/// logs a warning).
fn metrics() -> Result<&'static sys::MetricsApi> {
    sys::metrics_api().map_err(Error::unsupported)
}

fn cstr(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::internal("metric text contains NUL"))
}

impl Gauge {
    /// The gauge `name{model="<model>"}`.
    pub fn new(name: &'static str, description: &'static str, model: &str) -> Result<Gauge> {
        let kind = sys::TRITONSERVER_METRIC_KIND_GAUGE;
        Metric::new(kind, name, description, &[("model", model)]).map(Gauge)
    }

    pub fn set(&self, value: f64) {
        if let Ok(api) = metrics() {
            let _ = call!(api.TRITONSERVER_MetricSet(self.0 .0, value));
        }
    }
}

impl Counter {
    /// The counter `name{model="<model>"}`.
    pub fn new(name: &'static str, description: &'static str, model: &str) -> Result<Counter> {
        let kind = sys::TRITONSERVER_METRIC_KIND_COUNTER;
        Metric::new(kind, name, description, &[("model", model)]).map(Counter)
    }

    /// The counter `name{model="<model>",<label>="<value>"}`.
    pub fn with_label(
        name: &'static str,
        description: &'static str,
        model: &str,
        label: (&str, &str),
    ) -> Result<Counter> {
        let kind = sys::TRITONSERVER_METRIC_KIND_COUNTER;
        Metric::new(kind, name, description, &[("model", model), label]).map(Counter)
    }

    pub fn increment(&self) {
        if let Ok(api) = metrics() {
            let _ = call!(api.TRITONSERVER_MetricIncrement(self.0 .0, 1.0));
        }
    }
}

impl Metric {
    fn new(
        kind: sys::TRITONSERVER_MetricKind,
        name: &'static str,
        description: &'static str,
        labels: &[(&str, &str)],
    ) -> Result<Metric> {
        let family = family(kind, name, description)?;
        let api = metrics()?;
        let mut params = Vec::with_capacity(labels.len());
        let made = (|| {
            for (key, value) in labels {
                let (key, value) = (cstr(key)?, cstr(value)?);
                // SAFETY: valid C strings; the server copies them into the parameter.
                let label = unsafe {
                    api.TRITONSERVER_ParameterNew(
                        key.as_ptr(),
                        sys::TRITONSERVER_PARAMETER_STRING,
                        value.as_ptr().cast(),
                    )
                };
                if label.is_null() {
                    return Err(Error::internal("cannot create a metric label"));
                }
                params.push(label as *const sys::TRITONSERVER_Parameter);
            }
            let mut metric = ptr::null_mut();
            let count = params.len() as u64;
            call!(api.TRITONSERVER_MetricNew(&mut metric, family, params.as_ptr() as *mut _, count))
                .map(|()| Metric(metric))
        })();
        for label in params {
            // SAFETY: the labels are ours and no longer needed once the metric exists.
            unsafe { api.TRITONSERVER_ParameterDelete(label as *mut _) };
        }
        made
    }
}

impl Drop for Metric {
    fn drop(&mut self) {
        if let Ok(api) = metrics() {
            let _ = call!(api.TRITONSERVER_MetricDelete(self.0));
        }
    }
}
