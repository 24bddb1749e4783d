pub mod extract;
pub mod query;
