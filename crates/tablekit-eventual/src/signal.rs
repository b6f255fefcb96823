//! A ready-made shutdown future for [`crate::Worker::run_until`].

/// Resolves when the process is asked to stop: Ctrl-C (SIGINT) or, on Unix, SIGTERM (what
/// `kill`, systemd, Docker and Kubernetes send). Pass it to [`crate::Worker::run_until`] for
/// a graceful shutdown:
///
/// ```no_run
/// # async fn demo<J: tablekit_eventual::Job, H: tablekit_eventual::Handler<J>>(
/// #     worker: tablekit_eventual::Worker<J, H>,
/// # ) -> tablekit_core::Result<()> {
/// let report = worker.run_until(tablekit_eventual::shutdown_signal()).await?;
/// println!("processed {} jobs", report.processed);
/// # Ok(())
/// # }
/// ```
///
/// The handlers are installed when the future is first polled (the worker polls it as soon
/// as it starts) and must be polled inside a tokio runtime. If a handler cannot be installed,
/// that signal is ignored (and logged) rather than stopping the worker at once.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(target: "tablekit", error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(e) => {
                tracing::warn!(target: "tablekit", error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!(target: "tablekit", "Ctrl-C: shutting down"),
        () = terminate => tracing::info!(target: "tablekit", "SIGTERM: shutting down"),
    }
}
