//! Recurrent and signal-processing ops: RNN/GRU/LSTM, DFT/STFT, windows, mel filters.

pub mod dft;
pub mod rnn;
pub mod window;
