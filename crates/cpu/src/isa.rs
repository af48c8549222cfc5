//! The instruction set the CPU kernels use: decided once per session ([`Isa::select`]) and
//! handed to every kernel, so one session never mixes the portable and the vector paths and
//! the tests can run both on one machine.

use std::fmt;
use std::sync::OnceLock;

/// The kernels' instruction set. A value other than `Portable` exists only where the CPU has
/// its features ([`Isa::detect`], [`Isa::parse`] check them), which is what the kernels'
/// `unsafe` calls into code compiled with target features rely on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Plain Rust, any architecture.
    Portable,
    /// AVX2 + FMA intrinsics (x86-64, detected at run time).
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
    /// AVX-512 (F, BW, VL, DQ) where a 512-bit kernel pays, the AVX2 kernels elsewhere
    /// (x86-64 since Skylake-SP and Zen 4; every such CPU has AVX2 and FMA).
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// NEON (Advanced SIMD, with its fused multiply-add): aarch64's baseline, so every aarch64
    /// CPU has it.
    #[cfg(target_arch = "aarch64")]
    Neon,
    /// NEON plus the dot-product extension (`SDOT`, Armv8.2's FEAT_DotProd, detected at run
    /// time): the int8 kernels take four byte products per lane and instruction.
    #[cfg(target_arch = "aarch64")]
    NeonDot,
}

/// The environment variable that forces an ISA (`portable`, `avx2`, `avx512`, `neon`,
/// `neon-dot`).
pub const ISA_ENV: &str = "FERROLITE_ISA";

impl Isa {
    /// The best instruction set this CPU supports (detected once).
    pub fn detect() -> Isa {
        static ISA: OnceLock<Isa> = OnceLock::new();
        *ISA.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                let avx512 = is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512dq");
                return if avx512 { Isa::Avx512 } else { Isa::Avx2Fma };
            }
            #[cfg(target_arch = "aarch64")]
            return if std::arch::is_aarch64_feature_detected!("dotprod") {
                Isa::NeonDot
            } else {
                Isa::Neon
            };
            #[allow(unreachable_code)]
            Isa::Portable
        })
    }

    /// Whether the AVX2 + FMA kernels may run (`Avx2Fma`, and `Avx512`, whose CPUs have both).
    pub fn has_avx2(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma | Isa::Avx512 => true,
            _ => false,
        }
    }

    /// Whether the NEON kernels may run (`Neon` and `NeonDot`).
    pub fn has_neon(self) -> bool {
        match self {
            #[cfg(target_arch = "aarch64")]
            Isa::Neon | Isa::NeonDot => true,
            _ => false,
        }
    }

    /// Whether the 512-bit kernels may run (`Avx512`).
    pub fn has_avx512(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => true,
            _ => false,
        }
    }

    /// Every instruction set this CPU can run, portable first (the tests run each).
    pub fn available() -> Vec<Isa> {
        let mut all = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        match Isa::detect() {
            Isa::Portable => {}
            Isa::Avx2Fma => all.push(Isa::Avx2Fma),
            Isa::Avx512 => all.extend([Isa::Avx2Fma, Isa::Avx512]),
        }
        #[cfg(target_arch = "aarch64")]
        match Isa::detect() {
            Isa::NeonDot => all.extend([Isa::Neon, Isa::NeonDot]),
            _ => all.push(Isa::Neon),
        }
        all
    }

    /// The ISA named `name` (`portable`, `avx2`, `avx512`, `neon`, `neon-dot`), when this CPU
    /// can run it.
    pub fn parse(name: &str) -> Result<Isa, String> {
        let known = "portable, avx2, avx512, neon, neon-dot";
        let name = name.trim().to_ascii_lowercase();
        let wanted = match name.as_str() {
            "portable" => return Ok(Isa::Portable),
            "avx2" => "avx2",
            "avx512" => "avx512",
            "neon" => "neon",
            "neon-dot" => "neon-dot",
            other => return Err(format!("unknown ISA '{other}'; known ISAs: {known}")),
        };
        Isa::available()
            .into_iter()
            .find(|i| i.name() == wanted)
            .ok_or_else(|| format!("this CPU lacks {wanted} (it has: {})", Isa::names()))
    }

    /// The session's ISA: `requested` (an option) or else `FERROLITE_ISA`, else the best
    /// detected one.
    pub fn select(requested: Option<&str>) -> Result<Isa, String> {
        let from_env = std::env::var(ISA_ENV).ok();
        match requested.or(from_env.as_deref()) {
            Some(name) if !name.trim().is_empty() => {
                Isa::parse(name).map_err(|e| format!("{ISA_ENV}/isa option: {e}"))
            }
            _ => Ok(Isa::detect()),
        }
    }

    /// The short name `parse` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => "avx2",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => "avx512",
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => "neon",
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDot => "neon-dot",
        }
    }

    /// The names of [`Isa::available`], comma-separated.
    pub fn names() -> String {
        let names: Vec<&str> = Isa::available().iter().map(|i| i.name()).collect();
        names.join(", ")
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Isa::Portable => write!(f, "portable"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => write!(f, "avx2+fma"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => write!(f, "avx512f+bw+vl+dq"),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => write!(f, "neon+fma"),
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDot => write!(f, "neon+fma+dotprod"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for isa in Isa::available() {
            assert_eq!(Isa::parse(isa.name()), Ok(isa));
        }
        assert!(Isa::parse("sse9").unwrap_err().contains("unknown ISA"));
        assert_eq!(Isa::select(Some("portable")), Ok(Isa::Portable));
    }

    /// What the kernel tests run on this machine (CI prints it): every aarch64 CPU has NEON,
    /// and the dot product where the CPU says so.
    #[test]
    fn available_isas_follow_the_cpu() {
        let all = Isa::available();
        eprintln!("ISAs tested: {}", Isa::names());
        assert_eq!(all[0], Isa::Portable);
        assert_eq!(Isa::detect(), *all.last().unwrap());
        #[cfg(target_arch = "aarch64")]
        {
            assert!(all.contains(&Isa::Neon));
            let dot = std::arch::is_aarch64_feature_detected!("dotprod");
            assert_eq!(all.contains(&Isa::NeonDot), dot);
            assert_eq!(Isa::parse("neon-dot").is_ok(), dot);
        }
        #[cfg(target_arch = "x86_64")]
        assert!(Isa::parse("neon").unwrap_err().contains("lacks neon"));
    }
}
