//! The server's malloc setting (`return_large_buffers_to_the_os`), in a test binary of its own:
//! malloc's counters are process-wide, and a test running beside it in one binary (freeing its
//! own mapped blocks meanwhile) made the measurement fail now and then.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

/// Bytes malloc holds in blocks mapped on their own.
fn mapped_bytes() -> usize {
    // SAFETY: mallinfo only reads malloc's counters. (mallinfo2 would need glibc 2.33.)
    let info = unsafe { libc::mallinfo() };
    info.hblkhd as u32 as usize
}

#[test]
fn a_request_sized_buffer_is_mapped_again_after_one_was_freed() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        eprintln!("MALLOC_MMAP_THRESHOLD_ is set: the server leaves the threshold to it");
        return;
    }
    ferrolite_serve::return_large_buffers_to_the_os();
    let size = 600 * 1024;
    // Freeing a mapped block is what raises glibc's dynamic threshold past its size.
    drop(std::hint::black_box(vec![1u8; size]));
    let before = mapped_bytes();
    let second = std::hint::black_box(vec![2u8; size]);
    let grew = mapped_bytes().saturating_sub(before);
    drop(second);
    assert!(
        grew >= size,
        "the second {size}-byte buffer came from an arena ({grew} bytes mapped)"
    );
}
