"""Write configs/mnist/compression_profile.csv: the bandwidth profile of the MNIST compression study
(docs/compression.md, "The study"), so anyone can remake it byte for byte.

    python configs/mnist/make_compression_profile.py      # writes the CSV beside this file

Ten rows, cycled over the 100 devices by data.seed's permutation (docs/devices.md). Every row keeps
configs/mnist_prelim.yaml's speed (0.001 s per sample; the config's Zipf idle times stay on, since it
sets clock.idle) and is always online, so the links are the only thing that changes. Upload bandwidths
are log-spaced from 2 to 45 kB/s (16 to 360 kbit/s: a congested or far-from-the-mast mobile uplink),
downloads 10 times faster (asymmetric links). LeNet-5's float32 model, 246,824 bytes, then uploads in
123 s on the slowest link and 5.5 s on the fastest, against about 3 to 30 s of training per job: the
uploads matter, and a slow device's update arrives stale.
"""
from pathlib import Path

ROWS = 10
LOW, HIGH = 2_000.0, 45_000.0  # upload bytes per second, slowest and fastest
DOWNLOAD_FACTOR = 10


def rows() -> list[str]:
    out = []
    for i in range(ROWS):
        up = round(LOW * (HIGH / LOW) ** (i / (ROWS - 1)))
        out.append(f"link{i},0.001,{DOWNLOAD_FACTOR * up},{up},,always")
    return out


def main() -> None:
    path = Path(__file__).with_name("compression_profile.csv")
    header = ["# the MNIST compression study's bandwidth profile, made by configs/mnist/make_compression_profile.py",
              "# (upload 2 to 45 kB/s log-spaced, download 10x, always online, prelim speed)",
              "id,sec_per_sample,download_bytes_per_s,upload_bytes_per_s,period_s,windows"]
    path.write_text("\n".join(header + rows()) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
