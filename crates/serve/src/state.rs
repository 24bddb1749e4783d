//! What every request shares: the repository (read-only), the searcher held open, the
//! admin token, the sessions and the login limiter.

use crate::auth::{LoginLimiter, Sessions};
use crate::token::AdminToken;
use mailvault_core::search::exec::Searcher;
use mailvault_core::Repository;
use std::sync::{Arc, Mutex, MutexGuard};

/// The server's shared state (cheap to clone: an `Arc`).
#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

pub struct Inner {
    pub repo: &'static Repository,
    /// The index and the places map, opened once; searches run on blocking threads.
    pub searcher: Arc<Searcher<'static>>,
    pub token: AdminToken,
    pub sessions: Mutex<Sessions>,
    pub limiter: Mutex<LoginLimiter>,
    pub page_size: usize,
    /// The search cache (the places map, read for the snapshots that hold a message).
    pub cache: std::path::PathBuf,
}

impl AppState {
    pub fn new(
        repo: &'static Repository,
        searcher: Searcher<'static>,
        token: AdminToken,
        page_size: usize,
        cache: std::path::PathBuf,
    ) -> AppState {
        AppState(Arc::new(Inner {
            repo,
            searcher: Arc::new(searcher),
            token,
            sessions: Mutex::new(Sessions::default()),
            limiter: Mutex::new(LoginLimiter::default()),
            page_size: page_size.clamp(1, 1000),
            cache,
        }))
    }

    pub fn sessions(&self) -> MutexGuard<'_, Sessions> {
        lock(&self.0.sessions)
    }

    pub fn limiter(&self) -> MutexGuard<'_, LoginLimiter> {
        lock(&self.0.limiter)
    }
}

/// A mutex's guard, poisoned or not: the maps it guards stay consistent at every step.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
