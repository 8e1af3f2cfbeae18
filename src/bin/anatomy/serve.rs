//! `anatomy serve`: the model behind an OpenAI-compatible API and the chat page.

use llm_anatomy::serve::{ServeOptions, serve};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// A Hugging Face directory (config.json + safetensors) or a .gguf file.
    model: PathBuf,
    /// Address to listen on; loopback unless given.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    host: IpAddr,
    /// Port (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// A tokenizer file instead of the model's own.
    #[arg(long)]
    vocab: Option<PathBuf>,
    /// Threads for the forward pass (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Requests that may wait for the model; one more gets 503.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Positions per request (prompt + new tokens); bounds each request's KV cache.
    #[arg(long, default_value_t = 4096)]
    max_context: usize,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| anyhow::anyhow!("--threads {n}: {e}"))?;
    }
    let opts = ServeOptions {
        model: args.model,
        vocab: args.vocab,
        addr: SocketAddr::new(args.host, args.port),
        queue: args.queue.max(1),
        max_context: args.max_context.max(1),
    };
    serve(&opts, |addr| {
        println!("anatomy serve: listening on http://{addr}/")
    })?;
    Ok(())
}
