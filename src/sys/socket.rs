//! Unix sockets with descriptor passing, and the waits on descriptors (poll, pidfd, inotify).

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;

use nix::sys::socket::{
    accept4, bind, connect, getsockopt, listen, recvmsg, sendmsg, setsockopt, socket, socketpair,
    sockopt, AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag,
    SockType, UnixAddr,
};

use super::error::*;

/// The address of the abstract unix socket `name`: no file anywhere, gone with the socket, and
/// bound by one socket at a time.
fn abstract_addr(name: &str) -> Result<UnixAddr> {
    UnixAddr::new_abstract(name.as_bytes()).map_err(call("socket name"))
}

fn seqpacket() -> Result<OwnedFd> {
    let flags = SockFlag::SOCK_CLOEXEC;
    socket(AddressFamily::Unix, SockType::SeqPacket, flags, None).map_err(call("socket"))
}

/// A socket listening on the abstract name `name`; EADDRINUSE when another socket holds it.
pub fn listen_abstract(name: &str) -> Result<OwnedFd> {
    let fd = seqpacket()?;
    bind(fd.as_raw_fd(), &abstract_addr(name)?).map_err(call("bind"))?;
    listen(&fd, Backlog::MAXCONN).map_err(call("listen"))?;
    Ok(fd)
}

/// A connection to the abstract name `name` whose other end is `uid`'s, and that end's pid.
/// Abstract names are open to every user, so the kernel's record of who listens (SO_PEERCRED)
/// is checked on this very connection before anything crosses it. The connect never waits: a
/// listener whose backlog is full (another user's that never accepts) is EAGAIN at once, so
/// many such names cost nothing. Each later send and receive waits at most `wait`.
/// ECONNREFUSED where nothing listens, `SysError::Foreign` where another user does.
pub fn connect_own(name: &str, uid: u32, wait: std::time::Duration) -> Result<(OwnedFd, i32)> {
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let fd =
        socket(AddressFamily::Unix, SockType::SeqPacket, flags, None).map_err(call("socket"))?;
    connect(fd.as_raw_fd(), &abstract_addr(name)?).map_err(call("connect"))?;
    let (owner, pid) = peer(&fd)?;
    if owner != uid {
        return Err(SysError::Foreign { uid: owner });
    }
    nix::fcntl::fcntl(
        &fd,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )
    .map_err(call("fcntl"))?;
    set_timeouts(&fd, wait)?;
    Ok((fd, pid))
}

/// Two connected sockets of the kind `listen_abstract` makes.
pub fn socket_pair() -> Result<(OwnedFd, OwnedFd)> {
    let flags = SockFlag::SOCK_CLOEXEC;
    socketpair(AddressFamily::Unix, SockType::SeqPacket, None, flags).map_err(call("socketpair"))
}

pub fn accept(listener: &OwnedFd) -> Result<OwnedFd> {
    let fd = accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC).map_err(call("accept"))?;
    // SAFETY: accept4 returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The uid and pid of the process at the other end of `sock`, as the kernel recorded them when
/// it connected or listened: no process can claim another's.
pub fn peer(sock: &OwnedFd) -> Result<(u32, i32)> {
    let c = getsockopt(sock, sockopt::PeerCredentials).map_err(call("SO_PEERCRED"))?;
    Ok((c.uid(), c.pid()))
}

/// How long a receive on `sock` waits at most.
pub fn set_receive_timeout(sock: &OwnedFd, t: std::time::Duration) -> Result<()> {
    setsockopt(sock, sockopt::ReceiveTimeout, &timeval(t)).map_err(call("SO_RCVTIMEO"))
}

/// How long a connect, send or receive on `sock` waits at most.
pub fn set_timeouts(sock: &OwnedFd, t: std::time::Duration) -> Result<()> {
    setsockopt(sock, sockopt::SendTimeout, &timeval(t)).map_err(call("SO_SNDTIMEO"))?;
    set_receive_timeout(sock, t)
}

fn timeval(t: std::time::Duration) -> nix::sys::time::TimeVal {
    nix::sys::time::TimeVal::new(t.as_secs() as _, t.subsec_micros() as _)
}

/// The largest message `receive` takes whole.
const MAX_MESSAGE: usize = 64 << 10;

/// Send one message, with `fds` attached.
pub fn send(sock: &OwnedFd, data: &[u8], fds: &[RawFd]) -> Result<()> {
    let iov = [std::io::IoSlice::new(data)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
        .map(|_| ())
        .map_err(call("sendmsg"))
}

/// Receive one message and the descriptors attached to it; empty when the other end closed.
pub fn receive(sock: &OwnedFd) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(call("recvmsg"))?;
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(call("recvmsg"))? {
        if let ControlMessageOwned::ScmRights(got) = c {
            // SAFETY: the kernel made these descriptors for this process just now.
            fds.extend(
                got.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    let n = msg.bytes;
    buf.truncate(n);
    Ok((buf, fds))
}

/// Which of `fds` are readable or hung up, waiting up to `timeout` (None: for ever). All false
/// when a signal interrupted the wait.
pub fn wait_readable(
    fds: &[BorrowedFd],
    timeout: Option<std::time::Duration>,
) -> Result<Vec<bool>> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut p: Vec<PollFd> = (fds.iter())
        .map(|f| PollFd::new(*f, PollFlags::POLLIN))
        .collect();
    let t = match timeout {
        None => PollTimeout::NONE,
        Some(d) => PollTimeout::try_from(d.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(PollTimeout::MAX),
    };
    match poll(&mut p, t) {
        Ok(_) => Ok(p.iter().map(|p| p.any().unwrap_or(true)).collect()),
        Err(Errno::EINTR) => Ok(vec![false; fds.len()]),
        Err(e) => Err(call("poll")(e)),
    }
}

/// Whether the reader of the pipe whose write end is `w` is gone (the read end closed).
pub fn reader_gone(w: BorrowedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut p = [PollFd::new(w, PollFlags::POLLOUT)];
    poll(&mut p, PollTimeout::ZERO).is_ok()
        && p[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLERR))
}

/// A descriptor of process `pid` that becomes readable when it exits (pidfd_open).
pub fn pidfd(pid: i32) -> Result<OwnedFd> {
    // SAFETY: a plain syscall; a non-negative result is a new descriptor (close-on-exec).
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(call("pidfd_open")(Errno::last()));
    }
    // SAFETY: the descriptor is this process's and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A descriptor that becomes readable when an entry of the directory `dir` is created, removed,
/// renamed, written or has its attributes changed (inotify).
pub fn watch_dir(dir: &Path) -> Result<OwnedFd> {
    use nix::sys::inotify::{AddWatchFlags as W, InitFlags, Inotify};
    let i =
        Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).map_err(call("inotify"))?;
    let mask = W::IN_ATTRIB
        | W::IN_CLOSE_WRITE
        | W::IN_CREATE
        | W::IN_DELETE
        | W::IN_MODIFY
        | W::IN_MOVED_FROM
        | W::IN_MOVED_TO
        | W::IN_DELETE_SELF
        | W::IN_MOVE_SELF;
    i.add_watch(dir, mask).map_err(at("watch", dir))?;
    Ok(OwnedFd::from(i))
}

/// Read and drop what is waiting on a descriptor that `watch_dir` made.
pub fn drain(fd: &OwnedFd) {
    let mut buf = [0u8; 4096];
    while matches!(nix::unistd::read(fd, &mut buf), Ok(n) if n > 0) {}
}
