//! The sandbox protocol, both ways: frames as either side reads them, and the host
//! client's routing of a server's answers to the calls waiting for them.

use std::io::Cursor;
use std::path::Path;
use std::time::Duration;

use runner_protocol::{
    ExecRequest, FileKind, FileStamp, Message, Request, RequestFrame, Response, ResponseFrame,
    Stat, read_frame, read_message, write_data_frame, write_frame,
};
use serde::{Serialize, de::DeserializeOwned};

use super::{MIB, Target};

pub const FRAMES: Target = Target {
    name: "protocol_frames",
    about: "length-prefixed JSON and data frames, read by the server (requests) and the host (responses); a frame that reads writes back to the same frame",
    run: frames,
    seeds: frame_seeds,
    dictionary: &[
        b"\"op\":\"exec\"",
        b"\"kind\":\"output\"",
        b"\"id\":",
        b"\x80\x00\x00\x10",
        b"\x10\x00\x00\x00",
        b"\xff\xff\xff\xff",
    ],
    max_len: 256 * 1024,
    memory: 8 * MIB,
    time: Duration::from_secs(2),
};

pub const CLIENT: Target = Target {
    name: "client_answers",
    about: "the host's sandbox client reading a server's answers while calls wait: every call ends once the stream does",
    run: client,
    seeds: frame_seeds,
    dictionary: &[
        b"\"id\":1",
        b"\"id\":2",
        b"\"id\":3",
        b"\x80\x00\x00\x10",
        b"\xff\xff\xff\xff",
    ],
    max_len: 256 * 1024,
    memory: 8 * MIB,
    time: Duration::from_secs(5),
};

fn frames(data: &[u8]) {
    let mut input = Cursor::new(data);
    while let Ok(Some(message)) = read_message(&mut input) {
        match message {
            Message::Json(body) => {
                if let Ok(frame) = serde_json::from_slice::<RequestFrame>(&body) {
                    round_trip(&frame);
                }
                if let Ok(frame) = serde_json::from_slice::<ResponseFrame>(&body) {
                    round_trip(&frame);
                }
            }
            Message::Data { target, conn, data } => {
                let mut out = Vec::new();
                write_data_frame(&mut out, target, conn, &data)
                    .expect("a data frame that was read can be written");
                let Ok(Some(Message::Data {
                    target: t,
                    conn: c,
                    data: d,
                })) = read_message(&mut &out[..])
                else {
                    panic!("a data frame written did not read back as one");
                };
                assert_eq!((t, c, &d), (target, conn, &data));
            }
        }
    }
}

/// A frame that was read is written and read again, and is the same frame.
fn round_trip<T: Serialize + DeserializeOwned>(frame: &T) {
    let mut out = Vec::new();
    write_frame(&mut out, frame).expect("a frame that was read can be written");
    let back: T = read_frame(&mut &out[..])
        .expect("a frame that was written reads")
        .expect("a frame that was written is there");
    assert_eq!(
        serde_json::to_value(frame).ok(),
        serde_json::to_value(&back).ok(),
        "a frame changed on its way through write and read"
    );
}

fn client(data: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let answers = data.to_vec();
    runtime.block_on(async move {
        let client = runner_sandbox::SandboxClient::new(
            Cursor::new(answers),
            tokio::io::sink(),
            std::sync::Arc::new(String::new),
        );
        let calls = async {
            let stat = client.stat(Path::new("/w/a"));
            let read = client.read_all(Path::new("/w/b"), 1 << 20);
            let exec = async {
                let mut run = client.exec(exec_request()).await?;
                while !matches!(
                    run.next().await?,
                    runner_sandbox::client::ExecEvent::Exit(_)
                ) {}
                Ok::<_, runner_sandbox::SandboxError>(())
            };
            let _ = tokio::join!(stat, read, exec);
        };
        tokio::time::timeout(Duration::from_secs(3), calls)
            .await
            .expect("every call ends once the server's stream has ended");
    });
}

fn exec_request() -> ExecRequest {
    ExecRequest {
        command: "true".into(),
        cwd: "/w".into(),
        env: Vec::new(),
        timeout_ms: 1000,
        stdin: None,
        output_limit: 1 << 20,
        interactive: false,
    }
}

/// Real frames, as the encoders write them: a few requests, and answers to calls 1 to 3.
fn frame_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    let requests = [
        Request::Cancel { target: 3 },
        Request::Input {
            target: 3,
            data: b"yes\n".to_vec(),
        },
        Request::Stat {
            path: "/w/a".into(),
        },
    ];
    for (i, request) in requests.into_iter().enumerate() {
        let mut out = Vec::new();
        let _ = write_frame(
            &mut out,
            &RequestFrame {
                id: i as u64 + 1,
                request,
            },
        );
        seeds.push(out);
    }
    let answers = [
        (1, Response::Stat(stat())),
        (
            3,
            Response::Exit(runner_protocol::ExecStatus {
                code: Some(0),
                signal: None,
                timed_out: false,
                cancelled: false,
                dropped_bytes: 0,
            }),
        ),
        (
            2,
            Response::Error(runner_protocol::ApiError::new(
                runner_protocol::ErrorKind::NotFound,
                "no such file",
            )),
        ),
    ];
    let mut all = Vec::new();
    for (id, response) in answers {
        let mut out = Vec::new();
        let _ = write_frame(&mut out, &ResponseFrame { id, response });
        all.extend_from_slice(&out);
        seeds.push(out);
    }
    let mut data = Vec::new();
    let _ = write_data_frame(&mut data, 3, 7, b"some bytes of a connection");
    all.extend_from_slice(&data);
    seeds.push(data);
    seeds.push(all);
    seeds
}

fn stat() -> Stat {
    Stat {
        real_path: "/w/a".into(),
        kind: FileKind::File,
        stamp: FileStamp {
            mtime_ns: 1,
            size: 3,
            ino: 9,
        },
        mode: 0o644,
    }
}
