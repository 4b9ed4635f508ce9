pub mod client;
pub mod connection;
pub mod names;
pub mod settings;
