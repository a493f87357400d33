//! The syscalls of the holder (holder.rs: start as the user, signal, wait) and of a task's join
//! (join.rs: setns, pivot_root, chdir), behind two small traits as gpurun's src/sys/seam.rs:
//! `seam::Linux` makes them, and in tests `fake::Recorder` notes them, so that their exact
//! sequence is checked without root or a running holder.

#[cfg(test)]
pub mod fake;
pub mod seam;
