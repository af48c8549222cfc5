//! [`Real`]: the float operations the unary functions are written with, so one formula serves
//! the f64 reference and the f32 kernels' scalar paths.

/// f32 or f64.
pub trait Real: Copy + PartialOrd + std::fmt::Debug + Send + Sync + 'static
where
    Self: std::ops::Add<Output = Self>
        + std::ops::Sub<Output = Self>
        + std::ops::Mul<Output = Self>
        + std::ops::Div<Output = Self>
        + std::ops::Neg<Output = Self>,
{
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    /// An f32 attribute (alpha, beta, bounds) in this type.
    fn of(v: f32) -> Self;
    fn abs(self) -> Self;
    fn exp(self) -> Self;
    fn exp_m1(self) -> Self;
    fn ln(self) -> Self;
    fn ln_1p(self) -> Self;
    fn sqrt(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn round_ties_even(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tan(self) -> Self;
    fn asin(self) -> Self;
    fn acos(self) -> Self;
    fn atan(self) -> Self;
    fn sinh(self) -> Self;
    fn cosh(self) -> Self;
    fn tanh(self) -> Self;
    fn asinh(self) -> Self;
    fn acosh(self) -> Self;
    fn atanh(self) -> Self;
    fn max(self, other: Self) -> Self;
    fn min(self, other: Self) -> Self;
    fn copysign(self, sign: Self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! real {
    ($t:ident) => {
        impl Real for $t {
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn of(v: f32) -> Self {
                v as $t
            }
            real!(@unary $t: abs exp exp_m1 ln ln_1p sqrt floor ceil round_ties_even sin cos tan
                asin acos atan sinh cosh tanh asinh acosh atanh);
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                $t::max(self, other)
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                $t::min(self, other)
            }
            #[inline(always)]
            fn copysign(self, sign: Self) -> Self {
                $t::copysign(self, sign)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
        }
    };
    (@unary $t:ident: $($f:ident)*) => {$(
        #[inline(always)]
        fn $f(self) -> Self {
            $t::$f(self)
        }
    )*};
}
real!(f32);
real!(f64);
