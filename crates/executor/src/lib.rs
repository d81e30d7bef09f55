//! Quartermaster's executor: runs attempts of training jobs as local processes, with GPU
//! assignment, per-attempt logs, checkpoint detection and a graceful stop (DESIGN.md §4).
//!
//! The server builds a [`LocalExecutor`] from a [`LocalConfig`] and an event channel, gives
//! [`LocalExecutor::capacity`] to the core as physical capacity, and carries out the core's
//! start and stop effects with [`LocalExecutor::start`] and [`LocalExecutor::stop`]. What
//! happens to the processes comes back as [`ExecEvent`]s: `Running`, `Checkpoint`, `Progress`,
//! `Exited`.
//!
//! An attempt runs `ContainerEntrypoint` + `ContainerArguments` once per instance, each process
//! leading its own process group, in `data_dir/jobs/<job_id>/work` (the layout is in
//! [`layout`]). Its environment is the server's, then the payload's `Environment`, then
//! `CUDA_VISIBLE_DEVICES` (with `CUDA_DEVICE_ORDER=PCI_BUS_ID`), `SM_NUM_GPUS`, `SM_CURRENT_HOST`, `SM_HOSTS`, `SM_HPS`,
//! `SM_HP_<NAME>`, `SM_CHECKPOINT_DIR`, `SM_MODEL_DIR`, `SM_OUTPUT_DIR`, `SM_OUTPUT_DATA_DIR`,
//! `SM_TRAINING_JOB_NAME`, `QM_JOB_ID`, `QM_ATTEMPT` and `QM_PROGRESS_FILE` ([`progress`]).
//!
//! [`slurm`] runs attempts as jobs of a Slurm cluster instead; it reports the same events.
//!
//! Every local attempt runs under a supervisor process of its own ([`supervisor`], `qm
//! supervise`), which outlives the server; a restarted server adopts it.
//!
//! Modules: `inventory` (instances and GPUs), [`layout`] (directories and log names),
//! `environment`, `supervisor::attempt` (an attempt inside its supervisor: spawn, wait, stop,
//! timeout), `checkpoint` (the checkpoint scan, which also reads [`progress`]; the executor's
//! background tasks run it), `group` (process-group signals and stale reaping), [`cgroup`]
//! (each host's control group: memory, CPU, processes, GPU nodes), `outcome` (exit reasons
//! and usage; the exit itself is the core's `Exit`), `executor` (the public handle, its
//! shared state, its background tasks and its side of the supervisor link).

pub mod cgroup;
mod checkpoint;
mod clock;
pub mod container;
mod environment;
mod error;
mod executor;
mod gpu_usage;
mod group;
mod input;
mod inventory;
pub mod isolation;
pub mod layout;
mod logcap;
pub mod namespace;
mod outcome;
pub mod progress;
pub mod slurm;
mod staging;
pub mod supervisor;

pub use container::{valid_image, Podman, Runtime};
pub use environment::host_name;
pub use error::ExecError;
pub use executor::{
    ExecEvent, InputChannel, LaunchSpec, LocalConfig, LocalExecutor, OptMl, Reconciled, Recorded,
    RoleCredentials, SupervisorCommand, DEFAULT_GPU_SAMPLE, OUTCOME_FILE,
};
pub use inventory::{default_pools, detect_gpus, instance_type_for_gpu, GpuInfo, PoolSpec};
pub use isolation::JobUids;
pub use layout::{log_file_name, LogStream};
pub use outcome::{Exit, Usage, OUT_OF_MEMORY, TIMEOUT_REASON};
pub use progress::Steps;
/// The core's number of an attempt: the executor runs attempts by it.
pub use qm_core::AttemptId;
pub use qm_storage::{
    Location as StorageLocation, Settings as StorageSettings, Storage, StorageConfig, StorageUri,
};
