//! The Docker Compute Driver (SPEC C2). Being written under issue 3; until then every call is
//! refused with a clear code so nothing silently succeeds.

use super::*;

pub struct DockerDriver {
    _host: String,
}

impl DockerDriver {
    pub fn new(docker_host: &str) -> Result<DockerDriver, ComputeError> {
        Ok(DockerDriver {
            _host: docker_host.to_string(),
        })
    }

    fn refused<T>() -> Result<T, ComputeError> {
        Err(ComputeError::permanent(
            "DOCKER_DRIVER_UNAVAILABLE",
            "docker",
            None,
        ))
    }
}

impl ComputeDriver for DockerDriver {
    fn id(&self) -> &str {
        "docker"
    }
    fn implementation(&self) -> &str {
        "docker"
    }
    fn preflight(&self, _c: &CancelToken) -> Result<Vec<PreflightWarning>, ComputeError> {
        Ok(vec![PreflightWarning {
            code: "DOCKER_DRIVER_UNAVAILABLE".into(),
        }])
    }
    fn ensure_namespace(
        &self,
        _n: &NamespaceSpec,
        _c: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        Self::refused()
    }
    fn delete_namespace(
        &self,
        _n: &NamespaceSpec,
        _c: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        Self::refused()
    }
    fn prepare_revision(
        &self,
        _r: &RevisionSpec,
        _c: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        Self::refused()
    }
    fn activate_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        Self::refused()
    }
    fn stop_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        Self::refused()
    }
    fn retire_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        Self::refused()
    }
    fn delete_agent_runtime_credentials(
        &self,
        _a: &AgentSpec,
        _c: &CancelToken,
    ) -> Result<(), ComputeError> {
        Self::refused()
    }
    fn requires_stopped_predecessors(&self, _r: &RevisionSpec) -> bool {
        false
    }
}
